/**
 * The intent check: is what I am about to do covered by this PERMIT, constraints included?
 *
 * `verify` / `requirePermit` answer "is this an authentic, unexpired PERMIT for this
 * request". A bound grant (docs/receipts.md, "Constraints") adds limits the executor itself
 * must respect; `checkIntent` checks a concrete action against them, offline, and fails
 * closed: a constraint the intent states no value for, or that this SDK does not know,
 * refuses. Same rules and reason codes as the Python SDK's `check_intent` (the shared
 * vectors, testdata/vectors/intent.json, hold both to them):
 *
 * - `not_permit`, `malformed_receipt`, `expired`; `surface_mismatch`, `action_mismatch`,
 *   `actor_mismatch`, `request_digest_mismatch`;
 * - per constraint, by name in sorted order: `constraint_unknown:<name>`,
 *   `constraint_malformed:<name>`, `constraint_unverifiable:<name>`,
 *   `constraint_exceeded:<name>` (`allowed_tool_args.<argument>` for tool arguments).
 *
 * `max_amount`: `amount` (a finite number) ≤ the limit. `currency`: equal, exactly.
 * `allowed_commands`: `command` is an argv array (a string is refused: no shell
 * splitting); a string entry matches `argv[0]` exactly (no path resolution, no globbing),
 * an array entry matches the whole argv. `allowed_resources`: every resource is listed.
 * `allowed_tool_args`: each named argument is present and one of the listed values (JSON
 * equality) or a number within `{min, max}` (inclusive); other arguments are free.
 * An organization's own `x_…` constraint needs a checker in `options.checkers`.
 */
import { requestDigest, type DigestInput } from "./receipt.js";
import { parseTimestamp, toInstant } from "./time.js";

/** What the executor is about to do. Give every value the PERMIT may constrain. */
export interface Intent {
  surface: string;
  action?: string | null | undefined;
  actor?: string | null | undefined;
  /** The receipt's `request_digest` must equal it (or give `request`). */
  requestDigest?: string | undefined;
  /** The execute body; its digest stands in for `requestDigest`. */
  request?: DigestInput | undefined;
  amount?: number | undefined;
  currency?: string | undefined;
  /** The argv about to run. */
  command?: readonly string[] | undefined;
  resources?: readonly string[] | undefined;
  toolArgs?: Readonly<Record<string, unknown>> | undefined;
}

/** `ok`, or `reason` (a stable code) and `detail` (for people). */
export interface IntentCheck {
  readonly ok: boolean;
  readonly reason: string | null;
  readonly detail: string;
}

/** Checks an organization's own constraint: `null` when satisfied, else why not. */
export type ConstraintChecker = (value: unknown, intent: Intent) => string | null;

export interface CheckIntentOptions {
  now?: Date | number | string | bigint;
  checkers?: Readonly<Record<string, ConstraintChecker>>;
}

/** The PERMIT does not cover the intended work; `code` is the reason code. */
export class IntentRefused extends Error {
  readonly code: string;
  readonly check: IntentCheck;
  constructor(check: IntentCheck) {
    super(`${check.reason ?? "refused"}: ${check.detail}`);
    this.name = "IntentRefused";
    this.code = check.reason ?? "refused";
    this.check = check;
  }
}

type Problem = [reason: string, detail: string];

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);
const isNumber = (value: unknown): value is number => typeof value === "number" && Number.isFinite(value);
const isStrings = (value: unknown): value is string[] =>
  Array.isArray(value) && value.every((item) => typeof item === "string");

/** Check `intent` against an already verified PERMIT; never throws on bad receipts. */
export function checkIntent(receipt: unknown, intent: Intent, options: CheckIntentOptions = {}): IntentCheck {
  const problem = receiptProblem(receipt, intent, options) ?? constraintsProblem(receipt, intent, options);
  if (problem === null) return Object.freeze({ ok: true, reason: null, detail: "the PERMIT covers this intent" });
  return Object.freeze({ ok: false, reason: problem[0], detail: problem[1] });
}

/** `receipt` when it covers `intent`; else throw `IntentRefused`. */
export function requireIntent<R>(receipt: R, intent: Intent, options: CheckIntentOptions = {}): R {
  const check = checkIntent(receipt, intent, options);
  if (!check.ok) throw new IntentRefused(check);
  return receipt;
}

function receiptProblem(receipt: unknown, intent: Intent, options: CheckIntentOptions): Problem | null {
  if (!isRecord(receipt) || receipt.decision !== "PERMIT") {
    const decision = isRecord(receipt) ? receipt.decision : undefined;
    return ["not_permit", `the decision is ${JSON.stringify(decision ?? null)}, not PERMIT`];
  }
  const expiresAt = parseTimestamp(receipt.expires_at);
  if (expiresAt === undefined) return ["malformed_receipt", "the PERMIT has no valid expires_at"];
  if (toInstant(options.now ?? new Date()) >= expiresAt) {
    return ["expired", `the PERMIT expired at ${String(receipt.expires_at)}`];
  }
  const pairs: [string, unknown][] = [
    ["surface", intent.surface],
    ["action", intent.action ?? null],
    ["actor", intent.actor ?? null],
  ];
  for (const [name, wanted] of pairs) {
    if ((receipt[name] ?? null) !== wanted) {
      return [`${name}_mismatch`, `the PERMIT is for ${name} ${JSON.stringify(receipt[name] ?? null)}, not ${JSON.stringify(wanted)}`];
    }
  }
  const digest = intent.requestDigest ?? (intent.request !== undefined ? requestDigest(intent.request) : undefined);
  if (digest !== undefined && receipt.request_digest !== digest) {
    return ["request_digest_mismatch", "the PERMIT was issued for a different request"];
  }
  return null;
}

function constraintsProblem(receipt: unknown, intent: Intent, options: CheckIntentOptions): Problem | null {
  const constraints = isRecord(receipt) ? receipt.constraints : undefined;
  if (constraints === undefined || constraints === null) return null;
  if (!isRecord(constraints)) return ["malformed_receipt", "constraints is not a JSON object"];
  // Sorted by UTF-16 code units, as Python's sorted() orders these ASCII names.
  for (const name of Object.keys(constraints).sort()) {
    const value = constraints[name];
    const custom = options.checkers?.[name];
    if (custom !== undefined) {
      const explanation = custom(value, intent);
      if (explanation !== null) return [`constraint_exceeded:${name}`, explanation];
      continue;
    }
    const check = CHECKS[name];
    if (check === undefined) return [`constraint_unknown:${name}`, `this executor cannot check constraint ${JSON.stringify(name)}`];
    const problem = check(value, intent);
    if (problem !== null) return problem;
  }
  return null;
}

const CHECKS: Record<string, (value: unknown, intent: Intent) => Problem | null> = {
  max_amount(limit, intent) {
    if (!isNumber(limit)) return ["constraint_malformed:max_amount", "max_amount is not a number"];
    if (!isNumber(intent.amount)) return ["constraint_unverifiable:max_amount", "the intent states no amount"];
    if (intent.amount > limit) return ["constraint_exceeded:max_amount", `amount ${intent.amount} is more than ${limit}`];
    return null;
  },
  currency(currency, intent) {
    if (typeof currency !== "string") return ["constraint_malformed:currency", "currency is not a string"];
    if (typeof intent.currency !== "string") return ["constraint_unverifiable:currency", "the intent states no currency"];
    if (intent.currency !== currency) {
      return ["constraint_exceeded:currency", `currency ${JSON.stringify(intent.currency)} is not ${JSON.stringify(currency)}`];
    }
    return null;
  },
  allowed_commands(entries, intent) {
    const wellFormed =
      Array.isArray(entries) &&
      entries.every((e) => (typeof e === "string" ? e.length > 0 : isStrings(e) && e.length > 0));
    if (!wellFormed) return ["constraint_malformed:allowed_commands", "allowed_commands is not a list of commands"];
    const argv = intent.command;
    // A string would need shell splitting, whose rules are the executor's surprise.
    if (!isStrings(argv) || argv.length === 0) {
      return ["constraint_unverifiable:allowed_commands", "the intent states no command as an argv list"];
    }
    for (const entry of entries as (string | string[])[]) {
      if (typeof entry === "string" ? entry === argv[0] : jsonEqual(entry, argv)) return null;
    }
    return ["constraint_exceeded:allowed_commands", `command ${JSON.stringify(argv[0])} is not allowed`];
  },
  allowed_resources(allowed, intent) {
    if (!isStrings(allowed)) return ["constraint_malformed:allowed_resources", "allowed_resources is not a list of strings"];
    if (!isStrings(intent.resources)) {
      return ["constraint_unverifiable:allowed_resources", "the intent states no list of resources"];
    }
    for (const resource of intent.resources) {
      if (!allowed.includes(resource)) {
        return ["constraint_exceeded:allowed_resources", `resource ${JSON.stringify(resource)} is not allowed`];
      }
    }
    return null;
  },
  allowed_tool_args(rules, intent) {
    if (!isRecord(rules)) return ["constraint_malformed:allowed_tool_args", "allowed_tool_args is not an object"];
    for (const arg of Object.keys(rules).sort()) {
      const code = `allowed_tool_args.${arg}`;
      const rule = rules[arg];
      const args = intent.toolArgs;
      if (args === undefined || !Object.prototype.hasOwnProperty.call(args, arg)) {
        return [`constraint_unverifiable:${code}`, `the intent has no argument ${JSON.stringify(arg)}`];
      }
      const value = args[arg];
      if (Array.isArray(rule)) {
        if (!rule.some((allowed) => jsonEqual(value, allowed))) {
          return [`constraint_exceeded:${code}`, `${arg}=${JSON.stringify(value)} is not an allowed value`];
        }
        continue;
      }
      const keys = isRecord(rule) ? Object.keys(rule) : [];
      if (!isRecord(rule) || keys.length === 0 || keys.some((k) => k !== "min" && k !== "max")) {
        return [`constraint_malformed:${code}`, `the rule for ${JSON.stringify(arg)} is not values or bounds`];
      }
      if (("min" in rule && !isNumber(rule.min)) || ("max" in rule && !isNumber(rule.max))) {
        return [`constraint_malformed:${code}`, `the bounds of ${JSON.stringify(arg)} are not numbers`];
      }
      if (!isNumber(value)) return [`constraint_exceeded:${code}`, `${arg}=${JSON.stringify(value)} is not a number`];
      if ((isNumber(rule.min) && value < rule.min) || (isNumber(rule.max) && value > rule.max)) {
        return [`constraint_exceeded:${code}`, `${arg}=${JSON.stringify(value)} is outside its bounds`];
      }
    }
    return null;
  },
};

/** Equality of JSON values (a boolean is never a number; objects by keys and values). */
function jsonEqual(a: unknown, b: unknown): boolean {
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => jsonEqual(x, b[i]));
  }
  if (isRecord(a) || isRecord(b)) {
    if (!isRecord(a) || !isRecord(b)) return false;
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length && keys.every((k) => Object.prototype.hasOwnProperty.call(b, k) && jsonEqual(a[k], b[k]));
  }
  return a === b;
}
