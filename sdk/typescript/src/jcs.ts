/**
 * RFC 8785 JSON Canonicalization Scheme (JCS), with no dependency.
 *
 * RFC 8785 was written so that ECMAScript can implement it directly:
 * - numbers are serialized as `Number.prototype.toString` does (RFC 8785 §3.2.2.3
 *   adopts the ECMAScript algorithm), so `1.0` → `1`, `-0` → `0`, `1e21` → `1e+21`;
 * - strings are escaped exactly as `JSON.stringify` escapes them (§3.2.2.2);
 * - object members are sorted by the UTF-16 code units of their names (§3.2.3),
 *   which is what `Array.prototype.sort` does with no comparator.
 *
 * What RFC 8785 forbids and `JSON.stringify` would let through is refused with a
 * `CanonicalizationError`: non-finite numbers, lone surrogates (I-JSON, RFC 7493 §2.1),
 * BigInts and cycles. Input is otherwise read the way `JSON.stringify` reads it
 * (`toJSON` is honoured, `undefined`/functions/symbols are left out of objects and
 * become `null` in arrays), so `canonicalize(x)` is the canonical form of the JSON
 * document that `JSON.stringify(x)` sends.
 */

/** The value cannot be canonicalized under RFC 8785. */
export class CanonicalizationError extends TypeError {
  override name = "CanonicalizationError";
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** The RFC 8785 canonical JSON text of `value`. */
export function canonicalize(value: unknown): string {
  const out: string[] = [];
  const serialized = write(value, out, new Set<object>(), false);
  if (!serialized) {
    throw new CanonicalizationError(`cannot canonicalize a top-level ${typeof value}`);
  }
  return out.join("");
}

/** The RFC 8785 canonical form of `value` as UTF-8 bytes (what gets hashed and signed). */
export function canonicalizeToBytes(value: unknown): Buffer {
  return Buffer.from(canonicalize(value), "utf8");
}

/** Append `value`; return false when it has no JSON form (undefined, function, symbol). */
function write(value: unknown, out: string[], stack: Set<object>, inArray: boolean): boolean {
  if (value !== null && typeof value === "object" && typeof (value as { toJSON?: unknown }).toJSON === "function") {
    value = (value as { toJSON: () => unknown }).toJSON();
  }
  if (value instanceof Number || value instanceof String || value instanceof Boolean) {
    value = value.valueOf();
  }
  switch (typeof value) {
    case "undefined":
    case "function":
    case "symbol":
      if (inArray) {
        out.push("null");
        return true;
      }
      return false;
    case "bigint":
      throw new CanonicalizationError("BigInt values have no JSON form");
    case "boolean":
      out.push(value ? "true" : "false");
      return true;
    case "number":
      if (!Number.isFinite(value)) {
        throw new CanonicalizationError(`${value} is not a JSON number (RFC 8785 §3.2.2.3)`);
      }
      out.push(value.toString()); // -0 → "0", as RFC 8785 requires
      return true;
    case "string":
      out.push(quote(value));
      return true;
    case "object":
      break;
  }
  if (value === null) {
    out.push("null");
    return true;
  }
  const object = value as object;
  if (stack.has(object)) {
    throw new CanonicalizationError("cyclic structure");
  }
  stack.add(object);
  if (Array.isArray(object)) {
    out.push("[");
    object.forEach((item, index) => {
      if (index > 0) out.push(",");
      write(item, out, stack, true);
    });
    out.push("]");
  } else {
    out.push("{");
    let first = true;
    const record = object as Record<string, unknown>;
    for (const name of Object.keys(record).sort()) {
      const mark = out.length;
      out.push(first ? "" : ",", quote(name), ":");
      if (write(record[name], out, stack, false)) {
        first = false;
      } else {
        out.length = mark; // no JSON form: the member is left out, as JSON.stringify does
      }
    }
    out.push("}");
  }
  stack.delete(object);
  return true;
}

function quote(text: string): string {
  if (LONE_SURROGATE.test(text)) {
    throw new CanonicalizationError("string contains a lone surrogate (not I-JSON, RFC 8785 §3.2.2.2)");
  }
  return JSON.stringify(text);
}
