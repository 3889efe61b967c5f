// A message's images and documents, as the model reads them: sent as OpenAI content parts when the
// model takes them and they are within the contract's limits, else left out and named in the text.
// Spec: contract.txt "parts" and "How the parts are sent".
import type { ModelInput, Part } from "../protocol/index.js";

/** The images a part may hold (link_connection_contract::MEDIA). */
export const IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"] as const;
/** The documents: PDF, or text of any kind. */
export const DOCUMENT_TYPES = ["application/pdf", "text/*"] as const;
/** At most this many bytes a part (PART_MAX) … */
export const PART_MAX = 10 * 1024 * 1024;
/** … and this many parts a message (PARTS_MAX). */
export const PARTS_MAX = 8;

/** The parts sent, and the message's text with a line naming each one left out and why. */
export interface SentParts {
  text: string;
  parts: Part[];
  /** Each part left out, named, with why. */
  leftOut: string[];
}

interface Media {
  kind: "image" | "document";
  mime: string;
  bytes: number;
  name: string;
}

/** A data: URL's type and decoded size; undefined for anything else (a link is never fetched). */
function dataUrl(url: string): { mime: string; bytes: number } | undefined {
  const m = /^data:([^;,]*)((?:;[^;,]*)*?)(;base64)?,/i.exec(url.slice(0, 300));
  if (!m) return undefined;
  const body = url.length - m[0].length;
  const padding = url.endsWith("==") ? 2 : url.endsWith("=") ? 1 : 0;
  return { mime: (m[1] || "text/plain").toLowerCase().trim(), bytes: m[3] ? Math.floor((body * 3) / 4) - padding : body };
}

function describe(part: Part, i: number): Media | { name: string; unusable: string } {
  if (part.type === "image_url") {
    const d = dataUrl(part.image_url.url);
    const name = `image ${i + 1}`;
    if (!d) return { name, unusable: "it is not a data: URL" };
    return { kind: "image", ...d, name };
  }
  if (part.type === "file") {
    const name = part.file.filename ? `${part.file.filename.replace(/[\r\n]+/g, " ").slice(0, 120)}` : `document ${i + 1}`;
    const d = part.file.file_data === undefined ? undefined : dataUrl(part.file.file_data);
    if (!d) return { name, unusable: "it is not a data: URL" };
    return { kind: "document", ...d, name };
  }
  return { name: `part ${i + 1}`, unusable: "it is not an image or a document" };
}

const accepted = (m: Media): boolean =>
  m.kind === "image" ? (IMAGE_TYPES as readonly string[]).includes(m.mime) : m.mime === "application/pdf" || m.mime.startsWith("text/");

const size = (bytes: number): string => (bytes >= 1024 * 1024 ? `${(bytes / (1024 * 1024)).toFixed(1)} MiB` : `${Math.ceil(bytes / 1024)} KiB`);

/**
 * Which of a message's parts go to a model that reads `inputs`: each image or document the model
 * takes, of an accepted type, at most PART_MAX, and the first PARTS_MAX of those; each other part is
 * left out and named in the text, with why, so the model (and the person) knows it was there.
 */
export function partsFor(text: string, parts: readonly Part[] | undefined, inputs: readonly ModelInput[]): SentParts {
  if (!parts?.length) return { text, parts: [], leftOut: [] };
  const sent: Part[] = [];
  const leftOut: string[] = [];
  parts.forEach((part, i) => {
    // A text part is text: it goes with the message whatever the model reads.
    if (part.type === "text") {
      sent.push(part);
      return;
    }
    const m = describe(part, i);
    if ("unusable" in m) leftOut.push(`${m.name} (${m.unusable})`);
    else if (!inputs.includes(m.kind)) leftOut.push(`${m.name} (this model reads ${inputs.includes("image") ? "images, not documents" : inputs.includes("document") ? "documents, not images" : "text only"})`);
    else if (!accepted(m)) leftOut.push(`${m.name} (${m.mime || "no type"} is not ${m.kind === "image" ? "a PNG, JPEG, GIF or WebP image" : "a PDF or text document"})`);
    else if (m.bytes > PART_MAX) leftOut.push(`${m.name} (${size(m.bytes)}, over the ${size(PART_MAX)} a part may be)`);
    else if (sent.filter((p) => p.type !== "text").length >= PARTS_MAX) leftOut.push(`${m.name} (past the ${PARTS_MAX} parts a message may hold)`);
    else sent.push(part);
  });
  if (leftOut.length === 0) return { text, parts: sent, leftOut };
  const note = `[left out of this message: ${leftOut.join("; ")}]`;
  return { text: text ? `${text}\n${note}` : note, parts: sent, leftOut };
}
