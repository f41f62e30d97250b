/**
 * `buf curl` prints each message of a server stream as an indented JSON
 * object, one after another with nothing between them but white space. This
 * splits such a text into the values it holds, failing on anything else (a
 * truncated object is an error, not a shorter stream).
 */
export function splitJsonValues(text: string): unknown[] {
  const out: unknown[] = [];
  let depth = 0;
  let start = -1;
  let inString = false;
  let escaped = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (inString) {
      if (escaped) escaped = false;
      else if (c === '\\') escaped = true;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '{' || c === '[') {
      if (depth === 0) start = i;
      depth++;
    } else if (c === '}' || c === ']') {
      depth--;
      if (depth < 0) throw new Error(`unbalanced '${c}' at offset ${i}`);
      if (depth === 0) out.push(JSON.parse(text.slice(start, i + 1)));
    } else if (depth === 0) {
      if (!/\s/.test(c)) throw new Error(`unexpected '${c}' at offset ${i}, outside any JSON object`);
    } else if (c === '"') {
      inString = true;
    }
  }
  if (depth !== 0) throw new Error(`truncated: a JSON value starting at offset ${start} never ends`);
  return out;
}

/**
 * splitJsonValues for a stream: `push` a chunk of `buf curl`'s output, get
 * the values it completed (a value may span chunks); anything but white space
 * between values is an error.
 */
export class JsonValueStream {
  private text = '';
  private depth = 0;
  private start = -1;
  private inString = false;
  private escaped = false;
  private at = 0;

  push(chunk: string): unknown[] {
    this.text += chunk;
    const out: unknown[] = [];
    for (; this.at < this.text.length; this.at++) {
      const c = this.text[this.at]!;
      if (this.inString) {
        if (this.escaped) this.escaped = false;
        else if (c === '\\') this.escaped = true;
        else if (c === '"') this.inString = false;
        continue;
      }
      if (c === '{' || c === '[') {
        if (this.depth === 0) this.start = this.at;
        this.depth++;
      } else if (c === '}' || c === ']') {
        this.depth--;
        if (this.depth < 0) throw new Error(`unbalanced '${c}'`);
        if (this.depth === 0) {
          out.push(JSON.parse(this.text.slice(this.start, this.at + 1)));
          // Drop what is done, so a long stream holds one value at most.
          this.text = this.text.slice(this.at + 1);
          this.at = -1;
        }
      } else if (this.depth === 0) {
        if (!/\s/.test(c)) throw new Error(`unexpected '${c}' outside any JSON object`);
      } else if (c === '"') {
        this.inString = true;
      }
    }
    return out;
  }
}
