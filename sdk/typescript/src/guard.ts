/**
 * `guarded`: wrap a tool (for example one an AI agent may call) so that it runs only
 * under an authentic, unexpired PERMIT for exactly the request it is about to make.
 * A `single_use` PERMIT is consumed before the tool runs (`client.requirePermit` does
 * it): if the service refuses (used already, expired) or cannot be reached, the tool
 * does not run.
 */
import type { AuthorizeRequest, Client, ClientRequirePermitOptions } from "./client.js";
import { NotPermittedError } from "./errors.js";
import type { PermitReceipt } from "./receipt.js";

/** A value, or how to compute it from the tool's input. */
export type FromInput<I, T> = T | ((input: I) => T);

export interface GuardSpec<I, R> {
  surface: FromInput<I, string>;
  actor?: FromInput<I, string | undefined>;
  action?: FromInput<I, string | undefined>;
  context?: FromInput<I, Record<string, unknown> | undefined>;
  payload?: FromInput<I, Record<string, unknown> | undefined>;
  idempotencyKey?: FromInput<I, string | undefined>;
  /**
   * Called instead of throwing on a `NotPermittedError` (DENY, SILENCE, a pending
   * ESCALATE, a single-use PERMIT used already: `ReceiptNotUsableError`), e.g. to hand
   * the agent a refusal it can read. Other failures (wire and connection errors,
   * unauthentic or expired receipts) always throw: the tool never runs without a PERMIT.
   */
  onNotPermitted?: (error: NotPermittedError, input: I) => R | Promise<R>;
  /**
   * Options passed to `client.requirePermit` (`now`, `signal`, `checkRequestDigest`,
   * `waitForApprovalMs`; `deferConsumption`: `fn` gets a single-use PERMIT unconsumed and
   * must `client.consume` it before acting).
   */
  options?: ClientRequirePermitOptions;
}

/**
 * `fn` wrapped: each call first asks `client.requirePermit` for the request the spec
 * builds from the input, then runs `fn(input, receipt)` only on a PERMIT.
 */
export function guarded<I, R>(
  client: Client,
  spec: GuardSpec<I, R>,
  fn: (input: I, receipt: PermitReceipt) => R | Promise<R>,
): (input: I) => Promise<R> {
  return async (input: I): Promise<R> => {
    const request: AuthorizeRequest = {
      surface: resolve(spec.surface, input) as string,
      actor: resolve(spec.actor, input),
      action: resolve(spec.action, input),
      context: resolve(spec.context, input),
      payload: resolve(spec.payload, input),
      idempotencyKey: resolve(spec.idempotencyKey, input),
    };
    let receipt: PermitReceipt;
    try {
      receipt = await client.requirePermit(request, spec.options);
    } catch (error) {
      if (error instanceof NotPermittedError && spec.onNotPermitted !== undefined) {
        return spec.onNotPermitted(error, input);
      }
      throw error;
    }
    return fn(input, receipt);
  };
}

function resolve<I, T>(value: FromInput<I, T> | undefined, input: I): T | undefined {
  return typeof value === "function" ? (value as (input: I) => T)(input) : value;
}
