// Who the agent is, as Link gives it to the harness: a block of the harness's own instruction file,
// between <!-- link:begin ... --> and <!-- link:end --> (spec: contract.txt "Into its files").
// Pure text: the store reads and writes the file.

/** Each text of the identity and the heading it goes under (Identity::all). */
export const IDENTITY_HEADINGS = [
  ["persona", "## Who you are"],
  ["owner", "## Your owner"],
  ["standing", "## Standing instructions"],
] as const;

export type IdentityTexts = Partial<Record<(typeof IDENTITY_HEADINGS)[number][0], string>>;

/** What every block's markers start with: a text of the identity may not hold it. */
export const BLOCK_MARK = "<!-- link:";
const BEGIN = "<!-- link:begin identity (written by Link at each configure: edit the agent's spec, not this) -->";
const END = "<!-- link:end -->";

/** A file's text with Link's block taken out: `before` and `after` are the rest, byte for byte. */
export interface Split {
  before: string;
  /** The block's text between its marker lines; undefined when the file holds no block. */
  block: string | undefined;
  after: string;
}

/** Finds Link's block: from a line starting <!-- link:begin to the next line <!-- link:end -->, each with its newline. */
export function splitBlock(text: string): Split {
  const begin = /^<!-- link:begin[^\n]*(\n|$)/m.exec(text);
  if (!begin) return { before: text, block: undefined, after: "" };
  const from = begin.index + begin[0].length;
  const end = /^<!-- link:end -->[^\n]*(\n|$)/m.exec(text.slice(from));
  // A begin without its end is no block: the text is the owner's, kept as it is.
  if (!end) return { before: text, block: undefined, after: "" };
  return { before: text.slice(0, begin.index), block: text.slice(from, from + end.index), after: text.slice(from + end.index + end[0].length) };
}

/** Why instructions that hold a line `<!-- link:begin` and, after it, a line `<!-- link:end -->` are not carried. */
export const LINK_BLOCK_HELD = 'holds lines that mark Link\'s block ("<!-- link:begin" to "<!-- link:end -->"), which the next configure would write over';

/** The block's inner text for the identity's texts: each under its heading; empty when there is none. */
export function blockText(identity: IdentityTexts): string {
  return IDENTITY_HEADINGS.filter(([key]) => identity[key]?.trim())
    .map(([key, heading]) => `${heading}\n${(identity[key] ?? "").trim()}\n`)
    .join("\n");
}

/**
 * The file's text with Link's block holding these texts: the block replaced where it is, or put first
 * when there was none; with no text, the block taken out. The rest of the file is kept byte for byte.
 */
export function withBlock(text: string, identity: IdentityTexts): string {
  const { before, block, after } = splitBlock(text);
  const inner = blockText(identity);
  const made = inner ? `${BEGIN}\n${inner}${END}\n` : "";
  return block === undefined ? made + text : before + made + after;
}

/** The file's text outside Link's block: what is the owner's own. */
export function outsideBlock(text: string): string {
  const { before, after } = splitBlock(text);
  return before + after;
}
