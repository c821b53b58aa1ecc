/**
 * Wire timestamps: RFC 3339 with a time zone, compared at microsecond precision.
 *
 * The server writes `2026-11-22T10:15:30.123Z`. The reference verifier
 * (`execauth.wire_time.parse_timestamp`) reads with Python's `datetime.fromisoformat`
 * after requiring a `T` and a zone; this parser accepts the same ISO 8601 forms that
 * matter (extended or basic date and time, `.` or `,` fraction of any length
 * truncated to microseconds, `Z` or a numeric offset of hours, minutes and seconds)
 * and refuses the same things (no zone, out-of-range fields, impossible dates).
 * Instants are `bigint` microseconds since the Unix epoch, so precision is never lost
 * to a double.
 */

/** Microseconds since 1970-01-01T00:00:00Z. */
export type Instant = bigint;

const DATE = /^(\d{4})(-?)(\d{2})\2(\d{2})$/;
const TIME = /^(\d{2})(?:(:?)(\d{2})(?:\2(\d{2})(?:[.,](\d+))?)?)?$/;
const OFFSET = /^([+-])(\d{2})(?:(:?)(\d{2})(?:\3(\d{2})(?:\.(\d{1,6}))?)?)?$/;

/** Parse an RFC 3339 timestamp with a zone; `undefined` when it is not one. */
export function parseTimestamp(text: unknown): Instant | undefined {
  if (typeof text !== "string" || !text.includes("T")) return undefined;
  const normalized = text.replace(/[Zz]/g, "+00:00");
  const separator = normalized.indexOf("T");
  const date = DATE.exec(normalized.slice(0, separator));
  if (!date) return undefined;
  const rest = normalized.slice(separator + 1);
  const zoneAt = rest.search(/[+-]/);
  if (zoneAt < 0) return undefined; // no time zone: refused, as the reference does
  const time = TIME.exec(rest.slice(0, zoneAt));
  const offset = OFFSET.exec(rest.slice(zoneAt));
  if (!time || !offset) return undefined;

  const year = Number(date[1]);
  const month = Number(date[3]);
  const day = Number(date[4]);
  const hour = Number(time[1]);
  const minute = Number(time[3] ?? 0);
  const second = Number(time[4] ?? 0);
  const micros = Number(((time[5] ?? "") + "000000").slice(0, 6));
  if (year < 1 || month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) return undefined;
  if (hour > 23 || minute > 59 || second > 59) return undefined;

  const offsetHours = Number(offset[2]);
  const offsetMinutes = Number(offset[4] ?? 0);
  const offsetSeconds = Number(offset[5] ?? 0);
  const offsetMicros = Number(((offset[6] ?? "") + "000000").slice(0, 6));
  // (Python reads "+05:60" as a six-hour offset; only |offset| < 24 h is required.)
  const offsetTotal =
    BigInt(((offsetHours * 60 + offsetMinutes) * 60 + offsetSeconds) * 1_000_000 + offsetMicros) *
    (offset[1] === "-" ? -1n : 1n);
  if (offsetTotal >= 86_400_000_000n || offsetTotal <= -86_400_000_000n) return undefined;

  const seconds = BigInt(daysFromCivil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second);
  return seconds * 1_000_000n + BigInt(micros) - offsetTotal;
}

/** A caller's notion of "now" as an instant: a Date, epoch milliseconds, or a timestamp. */
export function toInstant(moment: Date | number | string | bigint): Instant {
  if (typeof moment === "bigint") return moment;
  if (typeof moment === "string") {
    const parsed = parseTimestamp(moment);
    if (parsed === undefined) throw new RangeError(`not an RFC 3339 timestamp with a zone: ${moment}`);
    return parsed;
  }
  const millis = typeof moment === "number" ? moment : moment.getTime();
  if (!Number.isFinite(millis)) throw new RangeError("invalid time");
  return BigInt(Math.trunc(millis)) * 1000n;
}

/** Render an instant as the server does: `2026-11-22T10:15:30.123Z`. */
export function formatInstant(instant: Instant): string {
  return new Date(Number(instant / 1000n)).toISOString();
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28;
  return [4, 6, 9, 11].includes(month) ? 30 : 31;
}

/** Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm). */
function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const mp = (month + 9) % 12;
  const doy = Math.floor((153 * mp + 2) / 5) + day - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146_097 + doe - 719_468;
}
