// A prompt's ACP content blocks → the message a turn answers: text, and images as OpenAI content parts.
import type { ContentBlock } from "@agentclientprotocol/sdk";
import type { Part } from "../protocol/index.js";
import { wellFormed } from "../turn/wellformed.js";

export class ContentError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ContentError";
  }
}

export interface PromptContent {
  text: string;
  parts: Part[];
}

/** A media type as a data: URL carries it: a type and a subtype, no parameters. */
const MEDIA_TYPE = /^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}\/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$/i;
/** Base64 as providers decode it: its own alphabet, padded to a multiple of four. */
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/**
 * A data: URL of a block's media, checked first: a part is written into the conversation and sent
 * again at every turn after, so one a provider refuses would make every later turn fail.
 */
function dataUrl(what: string, mimeType: string, base64: string): string {
  if (!MEDIA_TYPE.test(mimeType)) throw new ContentError(`${what}'s mimeType ${JSON.stringify(mimeType.slice(0, 80))} is not a media type (type/subtype, no parameters)`);
  if (base64.length % 4 !== 0 || !BASE64.test(base64)) throw new ContentError(`${what}'s data is not base64 (A-Z, a-z, 0-9, + and /, padded with = to a multiple of four characters)`);
  return `data:${mimeType};base64,${base64}`;
}

function fileName(uri: string): string {
  const last = uri.split(/[\\/]/).filter(Boolean).at(-1);
  return last ?? uri;
}

/**
 * Text blocks (and links to resources, as their URI) are joined in order, one a line; an embedded
 * resource with text is appended after them, fenced and named by its URI; images become
 * `image_url` parts and other embedded files `file` parts, both as data: URLs. Text is made
 * well-formed (wellFormed).
 */
export function promptContent(blocks: readonly ContentBlock[]): PromptContent {
  const lines: string[] = [];
  const attached: string[] = [];
  const parts: Part[] = [];
  for (const block of blocks) {
    switch (block.type) {
      case "text":
        lines.push(block.text);
        break;
      case "resource_link":
        lines.push(block.uri);
        break;
      case "image":
        if (!block.data) throw new ContentError("an image block needs its data (a URI alone is not fetched)");
        parts.push({ type: "image_url", image_url: { url: dataUrl("an image block", block.mimeType, block.data) } });
        break;
      case "resource": {
        const r = block.resource;
        if ("text" in r) {
          attached.push(`${r.uri}\n\`\`\`\n${r.text}\n\`\`\``);
        } else if (r.mimeType?.startsWith("image/")) {
          parts.push({ type: "image_url", image_url: { url: dataUrl("a resource block", r.mimeType, r.blob) } });
        } else {
          parts.push({ type: "file", file: { file_data: dataUrl("a resource block", r.mimeType ?? "application/octet-stream", r.blob), filename: wellFormed(fileName(r.uri)) } });
        }
        break;
      }
      case "audio":
        throw new ContentError("audio prompts are not supported (promptCapabilities.audio is false)");
      default: {
        const never: never = block;
        throw new ContentError(`unknown content block ${JSON.stringify((never as { type?: unknown }).type)}`);
      }
    }
  }
  // Kept as the conversation's event and shown again at every replay: a lone surrogate (a JSON
  // string may hold one) is made U+FFFD here, so no reader of the event or of an update meets one.
  const text = wellFormed([lines.join("\n"), ...attached].filter((s) => s.length > 0).join("\n\n"));
  if (text.length === 0 && parts.length === 0) throw new ContentError("the prompt is empty");
  return { text, parts };
}
