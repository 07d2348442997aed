/**
 * A Dockerfile's words and variables, read as BuildKit's shell lexer reads them: words split
 * outside quotes, then each expanded (`$X`, `${X}`, `${X:-d}`, `${X:+a}`), quotes removed and
 * escapes applied, every result bounded. Refusals name the instruction and its line.
 */
import { DenError } from "@den/protocol";

/** An expanded word may be at most this long (a small file can ask for a huge one: `ENV A=$A$A`). */
export const MAX_EXPANDED_WORD = 256 * 1024;
const MAX_SUBSTITUTION_DEPTH = 16;

/** Where a refusal points: an instruction's line and keyword. */
export type Where = { line: number; keyword: string };

export function refuse(at: Where, why: string): never {
  throw new DenError("invalid_argument", `Dockerfile line ${at.line}: ${at.keyword} ${why}`, {
    line: at.line,
    instruction: at.keyword,
  });
}


/** docker's parseWords: split on blanks outside quotes, keeping quotes and escapes for the expansion step. */
export function parseWords(text: string, escape: string): string[] {
  const words: string[] = [];
  let word = "";
  let inWord = false;
  let quote = "";
  for (let pos = 0; pos < text.length; pos++) {
    let ch = text[pos]!;
    if (!quote && /\s/.test(ch)) {
      if (inWord) words.push(word);
      word = "";
      inWord = false;
      continue;
    }
    inWord = true;
    if (quote) {
      if (ch === quote) quote = "";
      else if (ch === escape && quote !== "'" && pos + 1 < text.length) ch += text[++pos]!;
    } else if (ch === "'" || ch === '"') {
      quote = ch;
    } else if (ch === escape && pos + 1 < text.length) {
      ch += text[++pos]!;
    }
    word += ch;
  }
  if (inWord) words.push(word);
  return words;
}

/** Where names resolve: `value` gives a set variable's value; `declared` says whether an unset one is known at all. */
export interface Scope {
  escape: string;
  value(name: string): string | undefined;
  declared(name: string): boolean;
  /** A plain `$X` of a name nothing declared: docker expands it to "" (BuildKit lints it); Den warns. */
  undeclared(name: string, at: Where): void;
}

/** docker's ProcessWord: quotes removed, escapes applied, `$X`, `${X}`, `${X:-d}`, `${X:+a}` (and the colon-less forms) expanded. */
export function expandWord(word: string, scope: Scope, at: Where): string {
  return new WordLexer(word, scope, at).word();
}

class WordLexer {
  private pos = 0;

  constructor(
    private readonly text: string,
    private readonly scope: Scope,
    private readonly at: Where,
  ) {}

  word(): string {
    return this.until(undefined, 0);
  }

  private fail(why: string): never {
    refuse(this.at, `${why} in ${JSON.stringify(this.text.length > 200 ? `${this.text.slice(0, 200)}...` : this.text)}`);
  }

  private grow(out: string, more: string): string {
    if (out.length + more.length > MAX_EXPANDED_WORD) this.fail(`expands to more than ${MAX_EXPANDED_WORD} characters`);
    return out + more;
  }

  /** Reads to the end, or through `stop` (the `}` closing a `${X:-...}`). */
  private until(stop: string | undefined, depth: number): string {
    let out = "";
    while (this.pos < this.text.length) {
      const ch = this.text[this.pos]!;
      if (stop !== undefined && ch === stop) {
        this.pos++;
        return out;
      }
      if (ch === "'") out = this.grow(out, this.singleQuoted());
      else if (ch === '"') out = this.grow(out, this.doubleQuoted(depth));
      else if (ch === "$") out = this.grow(out, this.dollar(depth));
      else {
        this.pos++;
        if (ch !== this.scope.escape) out = this.grow(out, ch);
        else if (this.pos < this.text.length) out = this.grow(out, this.text[this.pos++]!);
      }
    }
    if (stop !== undefined) this.fail("has a substitution missing its '}'");
    return out;
  }

  private singleQuoted(): string {
    const close = this.text.indexOf("'", this.pos + 1);
    if (close < 0) this.fail("has an unmatched single quote");
    const inner = this.text.slice(this.pos + 1, close);
    this.pos = close + 1;
    return inner;
  }

  private doubleQuoted(depth: number): string {
    let out = "";
    this.pos++;
    for (;;) {
      if (this.pos >= this.text.length) this.fail("has an unmatched double quote");
      const ch = this.text[this.pos]!;
      if (ch === '"') {
        this.pos++;
        return out;
      }
      if (ch === "$") {
        out = this.grow(out, this.dollar(depth));
        continue;
      }
      this.pos++;
      if (ch === this.scope.escape) {
        const next = this.text[this.pos];
        if (next === undefined) continue; // a trailing escape is dropped
        if (next === '"' || next === "$" || next === this.scope.escape) {
          out = this.grow(out, next);
          this.pos++;
          continue;
        }
      }
      out = this.grow(out, ch); // other escapes stay as written inside double quotes
    }
  }

  private dollar(depth: number): string {
    this.pos++; // the $
    if (this.text[this.pos] !== "{") {
      const name = this.name();
      return name ? this.lookup(name, true) : "$";
    }
    this.pos++; // the {
    const first = this.text[this.pos];
    if (first === undefined) this.fail("has a substitution missing its '}'");
    if (first === "{" || first === "}" || first === ":") this.fail("has a bad substitution");
    const name = this.name();
    if (!name) this.fail("has a bad substitution");
    const op = this.text[this.pos++];
    if (op === "}") return this.lookup(name, true);
    if (op === undefined) this.fail("has a substitution missing its '}'");
    const colon = op === ":";
    const modifier = colon ? this.text[this.pos++] : op;
    if (modifier !== "-" && modifier !== "+" && modifier !== "?") {
      this.fail(`uses \${${name}${colon ? ":" : ""}${modifier ?? ""}...}, which Den does not support (use :-, :+, - or +)`);
    }
    if (depth >= MAX_SUBSTITUTION_DEPTH) this.fail("nests substitutions too deeply");
    const alternative = this.until("}", depth + 1);
    const value = this.lookup(name, false);
    // With a colon an empty value counts as unset, as in the shell.
    const isSet = colon ? value !== "" : this.scope.value(name) !== undefined;
    if (modifier === "-") return isSet ? value : alternative;
    if (modifier === "+") return isSet ? alternative : "";
    if (!isSet) this.fail(`requires ${name}: ${alternative || "it is not set"}`);
    return value;
  }

  /** A name: letters, digits, _; or a run of digits; or one special parameter. */
  private name(): string {
    const rest = this.text.slice(this.pos);
    const match = /^(\d+|[@*#?$!-]|[\p{L}_][\p{L}\p{N}_]*)/u.exec(rest);
    const name = match?.[0] ?? "";
    this.pos += name.length;
    return name;
  }

  private lookup(name: string, report: boolean): string {
    const value = this.scope.value(name);
    if (value === undefined && report && !this.scope.declared(name)) this.scope.undeclared(name, this.at);
    return value ?? "";
  }
}
