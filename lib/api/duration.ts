// Go duration strings ("90s", "1h30m", "500ms", "10m0s"), as MCM's flags, MachineConfiguration
// fields and annotations such as machine-join-duration use them.

const unitMs: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  μs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

/** Milliseconds of a Go duration string; throws RangeError with an example when it is not one. */
export function parseGoDuration(s: string): number {
  const text = s.trim();
  if (text === '0') return 0;
  const negative = text.startsWith('-');
  const body = negative || text.startsWith('+') ? text.slice(1) : text;
  const re = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)/gy;
  let total = 0;
  let consumed = 0;
  for (let m = re.exec(body); m !== null; m = re.exec(body)) {
    const [whole, num, unit] = m;
    if (num === undefined || unit === undefined) break;
    total += Number(num) * (unitMs[unit] ?? 0);
    consumed += whole.length;
  }
  if (consumed === 0 || consumed !== body.length) {
    throw new RangeError(`invalid duration "${s}" (Go syntax, e.g. 90s, 10m, 1h30m)`);
  }
  return negative ? -total : total;
}

/** parseGoDuration, or undefined for an absent or malformed value. */
export function tryParseGoDuration(s: string | undefined): number | undefined {
  if (s === undefined || s.trim() === '') return undefined;
  try {
    return parseGoDuration(s);
  } catch {
    return undefined;
  }
}

/** Go's time.Duration.String() for whole milliseconds: "1h2m3s", "1m0s", "1.5s", "250ms", "0s". */
export function formatGoDuration(ms: number): string {
  const sign = ms < 0 ? '-' : '';
  let rest = Math.round(Math.abs(ms));
  if (rest === 0) return '0s';
  if (rest < 1000) return `${sign}${rest}ms`;
  const h = Math.floor(rest / 3_600_000);
  rest -= h * 3_600_000;
  const m = Math.floor(rest / 60_000);
  rest -= m * 60_000;
  const s = rest / 1000;
  const secs = Number.isInteger(s) ? String(s) : s.toFixed(3).replace(/0+$/, '');
  if (h > 0) return `${sign}${h}h${m}m${secs}s`;
  if (m > 0) return `${sign}${m}m${secs}s`;
  return `${sign}${secs}s`;
}
