// The three MachineDeployment annotations that govern voluntary disruption (replacing machines
// that outlived expire-after): how old a machine may get, how many machines may be disrupted at
// once, and the UTC cron windows during which disruption may start. Parsing is pure and total:
// every malformed value becomes a problem message for a condition or an event, never a throw.

import { tryParseGoDuration } from './duration.js';

const MINUTE_MS = 60_000;
const DAY_MS = 86_400_000;

/**
 * How far nextFire and prevFire look by default. Every satisfiable expression fires within 8
 * years (Feb 29 skips 2100), so only impossible ones such as `0 0 30 2 *` exhaust it.
 */
const FIRE_SEARCH_MS = 9 * 366 * DAY_MS;

/** How far windowState follows overlapping or chained windows before giving up on a close time. */
const CLOSE_SEARCH_MS = 7 * DAY_MS;

/** The default disruption budget, as a percentage of replicas (Karpenter's default too). */
const DEFAULT_BUDGET_PERCENT = 10;

export interface ParseProblem {
  ok: false;
  problem: string;
}

/** expire-after: the maximum machine age in ms; undefined when the annotation is absent. */
export function parseExpireAfter(
  value: string | undefined,
): { ok: true; ms: number | undefined } | ParseProblem {
  if (value === undefined) return { ok: true, ms: undefined };
  const ms = tryParseGoDuration(value);
  if (ms === undefined || !Number.isFinite(ms)) {
    return { ok: false, problem: `expire-after "${value}" is not a Go duration (e.g. 720h)` };
  }
  if (ms <= 0) return { ok: false, problem: `expire-after "${value}" must be greater than zero (e.g. 720h)` };
  return { ok: true, ms };
}

/**
 * disruption-budget: how many of `replicas` machines may be disrupted at once. A count ("2") is
 * taken as is (not capped at replicas); a percentage ("0%".."100%") is rounded up, as Kubernetes
 * rounds a PodDisruptionBudget's maxUnavailable. Absent means 10% rounded up (`explicit` false).
 */
export function parseDisruptionBudget(
  value: string | undefined,
  replicas: number,
): { ok: true; allowed: number; explicit: boolean } | ParseProblem {
  const total = Math.max(0, replicas);
  if (value === undefined) {
    return { ok: true, allowed: percentOf(DEFAULT_BUDGET_PERCENT, total), explicit: false };
  }
  const text = value.trim();
  const form = `a count ("2") or a percentage of replicas ("0%".."100%")`;
  const match = /^(\d+)(%?)$/.exec(text);
  const digits = match?.[1];
  const amount = digits === undefined ? Number.NaN : Number(digits);
  if (match === null || !Number.isSafeInteger(amount)) {
    return { ok: false, problem: `disruption-budget "${value}" is not ${form}` };
  }
  if (match[2] !== '%') return { ok: true, allowed: amount, explicit: true };
  if (amount > 100) {
    return { ok: false, problem: `disruption-budget "${value}" is above 100%; expected ${form}` };
  }
  return { ok: true, allowed: percentOf(amount, total), explicit: true };
}

function percentOf(percent: number, total: number): number {
  // An integer divided by 100 is either exact or clearly not an integer, so ceil is safe here.
  return Math.ceil((percent * total) / 100);
}

/**
 * A standard 5-field cron expression in UTC, expanded to the sorted values each field allows.
 * Sunday is 0 in daysOfWeek (a written 7 is folded into it).
 */
export interface CronSchedule {
  /** The expression as written (a macro such as @daily stays as is). */
  readonly source: string;
  readonly minutes: readonly number[];
  readonly hours: readonly number[];
  readonly daysOfMonth: readonly number[];
  readonly months: readonly number[];
  readonly daysOfWeek: readonly number[];
  /**
   * Whether day-of-month and day-of-week were written as something other than `*`. When both
   * are, a day matches if either field matches (the Vixie cron rule); otherwise both must.
   */
  readonly daysOfMonthRestricted: boolean;
  readonly daysOfWeekRestricted: boolean;
}

/** One disruption window: open for durationMs from every time its cron expression fires. */
export interface DisruptionWindow {
  /** The window as written in the annotation, trimmed. */
  readonly source: string;
  readonly cron: CronSchedule;
  readonly durationMs: number;
}

/**
 * disruption-schedule: windows separated by `;`, each `<cron> <duration>` (e.g.
 * `0 2 * * 1-5 4h; 30 22 * * sat,sun 90m`). Absent means no windows, i.e. always open.
 */
export function parseDisruptionSchedule(
  value: string | undefined,
): { ok: true; windows: DisruptionWindow[] } | ParseProblem {
  if (value === undefined) return { ok: true, windows: [] };
  if (value.trim() === '') {
    return {
      ok: false,
      problem: `disruption-schedule is empty; expected windows such as "0 2 * * 1-5 4h" separated by ";"`,
    };
  }
  const windows: DisruptionWindow[] = [];
  const parts = value.split(';');
  for (const [index, part] of parts.entries()) {
    const parsed = parseWindow(part.trim(), index + 1);
    if (!parsed.ok) return parsed;
    windows.push(parsed.window);
  }
  return { ok: true, windows };
}

const CRON_FORM =
  'a 5-field cron expression (minute hour day-of-month month day-of-week) or a macro such as @daily';

function parseWindow(text: string, position: number): { ok: true; window: DisruptionWindow } | ParseProblem {
  if (text === '') {
    return {
      ok: false,
      problem: `disruption-schedule window ${position} is empty; expected "<cron> <duration>"`,
    };
  }
  const where = `disruption-schedule window "${text}"`;
  const tokens = text.split(/\s+/);
  const durationText = tokens.pop() ?? '';
  if (tokens.length === 0) {
    return { ok: false, problem: `${where}: expected ${CRON_FORM} followed by a duration (e.g. 4h)` };
  }
  const durationMs = tryParseGoDuration(durationText);
  if (durationMs === undefined || !Number.isFinite(durationMs)) {
    return { ok: false, problem: `${where}: duration "${durationText}" is not a Go duration (e.g. 4h)` };
  }
  if (durationMs <= 0) {
    return { ok: false, problem: `${where}: duration "${durationText}" must be greater than zero` };
  }
  const cron = parseCron(tokens);
  if (!cron.ok) return { ok: false, problem: `${where}: ${cron.problem}` };
  return { ok: true, window: { source: text, cron: cron.cron, durationMs } };
}

const MACROS: Readonly<Record<string, string>> = {
  '@yearly': '0 0 1 1 *',
  '@annually': '0 0 1 1 *',
  '@monthly': '0 0 1 * *',
  '@weekly': '0 0 * * 0',
  '@daily': '0 0 * * *',
  '@midnight': '0 0 * * *',
  '@hourly': '0 * * * *',
};

interface FieldSpec {
  readonly name: string;
  readonly min: number;
  readonly max: number;
  /** Where `*` and `a/n` end: 6 for day-of-week, whose 7 only exists as another Sunday. */
  readonly starMax: number;
  /** Names for min, min+1, ... (lower case); empty when the field takes numbers only. */
  readonly names: readonly string[];
}

const FIELD_SPECS: readonly FieldSpec[] = [
  { name: 'minute', min: 0, max: 59, starMax: 59, names: [] },
  { name: 'hour', min: 0, max: 23, starMax: 23, names: [] },
  { name: 'day-of-month', min: 1, max: 31, starMax: 31, names: [] },
  {
    name: 'month',
    min: 1,
    max: 12,
    starMax: 12,
    names: ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'],
  },
  {
    name: 'day-of-week',
    min: 0,
    max: 7,
    starMax: 6,
    names: ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'],
  },
];

function parseCron(tokens: readonly string[]): { ok: true; cron: CronSchedule } | ParseProblem {
  const first = tokens[0] ?? '';
  let fields: readonly string[] = tokens;
  if (first.startsWith('@')) {
    const expansion = MACROS[first.toLowerCase()];
    if (expansion === undefined) {
      return {
        ok: false,
        problem: `unknown macro "${first}" (expected @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)`,
      };
    }
    if (tokens.length !== 1) {
      return { ok: false, problem: `expected ${CRON_FORM} followed by a duration (e.g. 4h)` };
    }
    fields = expansion.split(' ');
  } else if (tokens.length !== 5) {
    return {
      ok: false,
      problem: `expected ${CRON_FORM} followed by a duration (e.g. 4h); got ${tokens.length} cron fields`,
    };
  }
  const values: number[][] = [];
  for (const [index, spec] of FIELD_SPECS.entries()) {
    const text = fields[index] ?? '';
    const parsed = parseField(text, spec);
    if (!parsed.ok) return { ok: false, problem: `${spec.name} "${text}" ${parsed.problem}` };
    values.push(parsed.values);
  }
  const [minutes = [], hours = [], daysOfMonth = [], months = [], daysOfWeek = []] = values;
  return {
    ok: true,
    cron: {
      source: tokens.join(' '),
      minutes,
      hours,
      daysOfMonth,
      months,
      // 7 is another name for Sunday.
      daysOfWeek: [...new Set(daysOfWeek.map((d) => d % 7))].sort((a, b) => a - b),
      daysOfMonthRestricted: fields[2] !== '*',
      daysOfWeekRestricted: fields[4] !== '*',
    },
  };
}

/** The sorted values a field allows; the problem completes `<field> "<text>" ...`. */
function parseField(text: string, spec: FieldSpec): { ok: true; values: number[] } | ParseProblem {
  const allowed = new Set<number>();
  for (const item of text.split(',')) {
    if (item === '') return { ok: false, problem: 'has an empty list item' };
    const [range = '', stepText, ...extra] = item.split('/');
    if (extra.length > 0) return { ok: false, problem: `has "${item}" with more than one step` };
    let step = 1;
    if (stepText !== undefined) {
      if (!/^\d+$/.test(stepText) || Number(stepText) < 1) {
        return { ok: false, problem: `has step "${stepText}"; a step must be a whole number of at least 1` };
      }
      step = Number(stepText);
    }
    let low: number;
    let high: number;
    if (range === '*') {
      low = spec.min;
      high = spec.starMax;
    } else {
      const bounds = range.split('-');
      if (bounds.length > 2) return { ok: false, problem: `has "${range}", which is not a range a-b` };
      const [lowText = '', highText] = bounds;
      const lowValue = fieldValue(lowText, spec);
      if (!lowValue.ok) return lowValue;
      low = lowValue.value;
      if (highText !== undefined) {
        const highValue = fieldValue(highText, spec);
        if (!highValue.ok) return highValue;
        high = highValue.value;
        if (high < low) return { ok: false, problem: `has range "${range}", which runs backwards` };
      } else {
        // "a/n" runs from a to the end of the field; a plain "a" is just a.
        high = stepText === undefined ? low : Math.max(low, spec.starMax);
      }
    }
    for (let v = low; v <= high; v += step) allowed.add(v);
  }
  return { ok: true, values: [...allowed].sort((a, b) => a - b) };
}

function fieldValue(text: string, spec: FieldSpec): { ok: true; value: number } | ParseProblem {
  let value: number;
  if (/^\d+$/.test(text)) {
    value = Number(text);
  } else {
    const index = spec.names.indexOf(text.toLowerCase());
    if (index < 0) {
      const names =
        spec.names.length > 0 ? ` or a name ${spec.names[0] ?? ''}-${spec.names.at(-1) ?? ''}` : '';
      return { ok: false, problem: `has "${text}", which is not a number${names}` };
    }
    value = spec.min + index;
  }
  if (value < spec.min || value > spec.max) {
    return { ok: false, problem: `has ${value}, outside ${spec.min}-${spec.max}` };
  }
  return { ok: true, value };
}

/** Whether the windows are open at `now`, and when that next changes (see below). */
export interface WindowState {
  open: boolean;
  /**
   * When open: when no window is open any more, following overlapping and back-to-back windows;
   * undefined for no windows at all or when they stay open for more than 7 days. When closed:
   * the next time a window opens; undefined when none ever does (e.g. `0 0 30 2 *`).
   */
  changesAt: number | undefined;
}

/**
 * Evaluates windows at `now` (ms since epoch). A window whose cron fired at f is open during
 * [f, f + durationMs). No windows means always open.
 */
export function windowState(windows: readonly DisruptionWindow[], now: number): WindowState {
  if (windows.length === 0) return { open: true, changesAt: undefined };
  if (!windows.some((w) => openFireAt(w, now) !== undefined)) {
    let next: number | undefined;
    for (const w of windows) {
      const fire = nextFire(w.cron, now);
      if (fire !== undefined && (next === undefined || fire < next)) next = fire;
    }
    return { open: false, changesAt: next };
  }
  const horizon = now + CLOSE_SEARCH_MS;
  let closesAt = now;
  // Each pass extends closesAt to the end of every run still open at it; none open means closed.
  for (let extended = true; extended;) {
    extended = false;
    for (const w of windows) {
      const fire = openFireAt(w, closesAt);
      if (fire === undefined) continue;
      const end = runEnd(w, fire, horizon);
      if (end === undefined || end > horizon) return { open: true, changesAt: undefined };
      if (end > closesAt) {
        closesAt = end;
        extended = true;
      }
    }
  }
  return { open: true, changesAt: closesAt };
}

/** The fire time that makes w open at t (the latest one not after t), if w is open at t. */
function openFireAt(w: DisruptionWindow, t: number): number | undefined {
  const fire = prevFire(w.cron, t, t - w.durationMs);
  return fire !== undefined && fire + w.durationMs > t ? fire : undefined;
}

/**
 * When w closes, given that it fired at `fire`: it stays open while each next fire comes no
 * later than durationMs after the previous one. Whole hours and days of such fires are skipped at
 * once, so `* * * * * 24h` costs a few steps per day; undefined once past `horizon`.
 */
function runEnd(w: DisruptionWindow, fire: number, horizon: number): number | undefined {
  const { cron, durationMs } = w;
  const minutesChain = largestGap(cron.minutes) * MINUTE_MS <= durationMs;
  const firstMinute = cron.minutes[0] ?? 0;
  const lastMinute = cron.minutes.at(-1) ?? 0;
  for (let f = fire; f <= horizon;) {
    // The last fire of f's day reached without a gap longer than durationMs.
    const dayStart = f - (f % DAY_MS);
    let hour = Math.floor((f - dayStart) / 3_600_000);
    let minute = Math.floor((f % 3_600_000) / MINUTE_MS);
    for (;;) {
      minute = minutesChain ? lastMinute : lastChained(cron.minutes, minute, durationMs);
      if (minute !== lastMinute) break;
      const nextHour = nextAllowed(cron.hours, hour + 1);
      if (
        nextHour === undefined ||
        ((nextHour - hour) * 60 + firstMinute - lastMinute) * MINUTE_MS > durationMs
      ) {
        break;
      }
      hour = nextHour;
      minute = firstMinute;
    }
    const last = dayStart + (hour * 60 + minute) * MINUTE_MS;
    const next = nextFire(cron, last, last + durationMs);
    if (next === undefined) return last + durationMs;
    f = next;
  }
  return undefined;
}

function largestGap(sorted: readonly number[]): number {
  let gap = 0;
  for (let i = 1; i < sorted.length; i++) gap = Math.max(gap, (sorted[i] ?? 0) - (sorted[i - 1] ?? 0));
  return gap;
}

/** From `minute` (an allowed one), the furthest allowed minute reached by gaps of at most durationMs. */
function lastChained(minutes: readonly number[], minute: number, durationMs: number): number {
  let current = minute;
  for (const m of minutes) {
    if (m <= current) continue;
    if ((m - current) * MINUTE_MS > durationMs) break;
    current = m;
  }
  return current;
}

/**
 * The first minute strictly after afterMs at which cron fires, or undefined if none comes by
 * limitMs. Jumps month by month, then to the matching day, hour and minute, so any expression
 * costs a handful of steps per month searched.
 */
export function nextFire(
  cron: CronSchedule,
  afterMs: number,
  limitMs = afterMs + FIRE_SEARCH_MS,
): number | undefined {
  const start = Math.floor(afterMs / MINUTE_MS) * MINUTE_MS + MINUTE_MS;
  if (start > limitMs) return undefined;
  const at = new Date(start);
  let year = at.getUTCFullYear();
  let month = at.getUTCMonth() + 1;
  let day = at.getUTCDate();
  let hour = at.getUTCHours();
  let minute = at.getUTCMinutes();
  const lastYear = new Date(limitMs).getUTCFullYear();
  while (year <= lastYear) {
    const m = nextAllowed(cron.months, month);
    if (m === undefined) {
      [year, month, day, hour, minute] = [year + 1, 1, 1, 0, 0];
      continue;
    }
    if (m !== month) [month, day, hour, minute] = [m, 1, 0, 0];
    const d = nextDay(cron, year, month, day);
    if (d === undefined) {
      [month, day, hour, minute] = [month + 1, 1, 0, 0];
      if (month > 12) [year, month] = [year + 1, 1];
      continue;
    }
    if (d !== day) [day, hour, minute] = [d, 0, 0];
    const h = nextAllowed(cron.hours, hour);
    if (h === undefined) {
      [day, hour, minute] = [day + 1, 0, 0];
      continue;
    }
    if (h !== hour) [hour, minute] = [h, 0];
    const min = nextAllowed(cron.minutes, minute);
    if (min === undefined) {
      [hour, minute] = [hour + 1, 0];
      continue;
    }
    const fire = Date.UTC(year, month - 1, day, hour, min);
    return fire <= limitMs ? fire : undefined;
  }
  return undefined;
}

/**
 * The last minute at or before atOrBeforeMs at which cron fires, or undefined if none since
 * notBeforeMs. nextFire's mirror image, with the same cost.
 */
export function prevFire(
  cron: CronSchedule,
  atOrBeforeMs: number,
  notBeforeMs = atOrBeforeMs - FIRE_SEARCH_MS,
): number | undefined {
  const start = Math.floor(atOrBeforeMs / MINUTE_MS) * MINUTE_MS;
  if (start < notBeforeMs) return undefined;
  const at = new Date(start);
  let year = at.getUTCFullYear();
  let month = at.getUTCMonth() + 1;
  let day = at.getUTCDate();
  let hour = at.getUTCHours();
  let minute = at.getUTCMinutes();
  const firstYear = new Date(notBeforeMs).getUTCFullYear();
  while (year >= firstYear) {
    const m = prevAllowed(cron.months, month);
    if (m === undefined) {
      [year, month, day, hour, minute] = [year - 1, 12, 31, 23, 59];
      continue;
    }
    if (m !== month) [month, day, hour, minute] = [m, 31, 23, 59];
    const d = prevDay(cron, year, month, day);
    if (d === undefined) {
      [month, day, hour, minute] = [month - 1, 31, 23, 59];
      if (month < 1) [year, month] = [year - 1, 12];
      continue;
    }
    if (d !== day) [day, hour, minute] = [d, 23, 59];
    const h = prevAllowed(cron.hours, hour);
    if (h === undefined) {
      [day, hour, minute] = [day - 1, 23, 59];
      continue;
    }
    if (h !== hour) [hour, minute] = [h, 59];
    const min = prevAllowed(cron.minutes, minute);
    if (min === undefined) {
      [hour, minute] = [hour - 1, 59];
      continue;
    }
    const fire = Date.UTC(year, month - 1, day, hour, min);
    return fire >= notBeforeMs ? fire : undefined;
  }
  return undefined;
}

function nextAllowed(sorted: readonly number[], from: number): number | undefined {
  for (const v of sorted) if (v >= from) return v;
  return undefined;
}

function prevAllowed(sorted: readonly number[], from: number): number | undefined {
  for (let i = sorted.length - 1; i >= 0; i--) {
    const v = sorted[i];
    if (v !== undefined && v <= from) return v;
  }
  return undefined;
}

function daysInMonth(year: number, month: number): number {
  return (Date.UTC(year, month, 1) - Date.UTC(year, month - 1, 1)) / DAY_MS;
}

function weekday(year: number, month: number, day: number): number {
  // 1970-01-01 was a Thursday (4).
  return (((Date.UTC(year, month - 1, day) / DAY_MS + 4) % 7) + 7) % 7;
}

/** The first day from `day` on in the month that cron's day fields match, if any. */
function nextDay(cron: CronSchedule, year: number, month: number, day: number): number | undefined {
  const last = daysInMonth(year, month);
  if (day > last) return undefined;
  if (!cron.daysOfMonthRestricted && !cron.daysOfWeekRestricted) return day;
  let best: number | undefined;
  if (cron.daysOfMonthRestricted) {
    const d = nextAllowed(cron.daysOfMonth, day);
    if (d !== undefined && d <= last) best = d;
  }
  if (cron.daysOfWeekRestricted) {
    const from = weekday(year, month, day);
    const to = nextAllowed(cron.daysOfWeek, from) ?? (cron.daysOfWeek[0] ?? 0) + 7;
    const d = day + to - from;
    if (d <= last && (best === undefined || d < best)) best = d;
  }
  return best;
}

/** The last day up to `day` in the month that cron's day fields match, if any. */
function prevDay(cron: CronSchedule, year: number, month: number, day: number): number | undefined {
  const from = Math.min(day, daysInMonth(year, month));
  if (from < 1) return undefined;
  if (!cron.daysOfMonthRestricted && !cron.daysOfWeekRestricted) return from;
  let best: number | undefined;
  if (cron.daysOfMonthRestricted) {
    const d = prevAllowed(cron.daysOfMonth, from);
    if (d !== undefined) best = d;
  }
  if (cron.daysOfWeekRestricted) {
    const wd = weekday(year, month, from);
    const to = prevAllowed(cron.daysOfWeek, wd) ?? (cron.daysOfWeek.at(-1) ?? 0) - 7;
    const d = from - (wd - to);
    if (d >= 1 && (best === undefined || d > best)) best = d;
  }
  return best;
}
