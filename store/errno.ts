// Whether an error is the system error `code` (ENOENT, EEXIST, …). Free of zod, for the light start-up path.
export function isErrno(e: unknown, code: string): boolean {
  return typeof e === "object" && e !== null && (e as { code?: unknown }).code === code;
}
