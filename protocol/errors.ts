// Errors that name what failed in words a person can act on.
import type { z } from "zod";

/** One line: each issue's path and message, never the input's values (a secret is never echoed). */
export function describeIssues(error: z.ZodError): string {
  return error.issues
    .map((issue) => {
      const where = issue.path.length > 0 ? issue.path.map(String).join(".") : "(top)";
      return `${where}: ${issue.message.replace(/\s+/g, " ")}`;
    })
    .join("; ");
}

/** A file on disk that fails its schema or cannot be read: named, never skipped. */
export class StoreError extends Error {
  constructor(
    message: string,
    readonly path: string,
  ) {
    super(message);
    this.name = "StoreError";
  }
}
