// A prompt's ACP content blocks → the message a turn answers: text, and images as OpenAI content parts.
import type { ContentBlock } from "@agentclientprotocol/sdk";
import type { Part } from "../protocol/index.js";

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

const dataUrl = (mimeType: string, base64: string) => `data:${mimeType};base64,${base64}`;

function fileName(uri: string): string {
  const last = uri.split(/[\\/]/).filter(Boolean).at(-1);
  return last ?? uri;
}

/**
 * Text blocks (and links to resources, as their URI) are joined in order, one a line; an embedded
 * resource with text is appended after them, fenced and named by its URI; images become
 * `image_url` parts and other embedded files `file` parts, both as data: URLs.
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
        parts.push({ type: "image_url", image_url: { url: dataUrl(block.mimeType, block.data) } });
        break;
      case "resource": {
        const r = block.resource;
        if ("text" in r) {
          attached.push(`${r.uri}\n\`\`\`\n${r.text}\n\`\`\``);
        } else if (r.mimeType?.startsWith("image/")) {
          parts.push({ type: "image_url", image_url: { url: dataUrl(r.mimeType, r.blob) } });
        } else {
          parts.push({ type: "file", file: { file_data: dataUrl(r.mimeType ?? "application/octet-stream", r.blob), filename: fileName(r.uri) } });
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
  const text = [lines.join("\n"), ...attached].filter((s) => s.length > 0).join("\n\n");
  if (text.length === 0 && parts.length === 0) throw new ContentError("the prompt is empty");
  return { text, parts };
}
