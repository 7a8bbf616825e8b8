import { expect } from 'chai';

import {
  nextFire,
  parseDisruptionBudget,
  parseDisruptionSchedule,
  parseExpireAfter,
  prevFire,
  windowState,
} from '../../../lib/api/disruption.js';
import type { CronSchedule, DisruptionWindow } from '../../../lib/api/disruption.js';

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;

/** ms of an ISO time; a bare "2025-01-01T02:00" is read as UTC. */
function at(text: string): number {
  const ms = Date.parse(text.endsWith('Z') ? text : `${text}Z`);
  if (Number.isNaN(ms)) throw new Error(`bad test time ${text}`);
  return ms;
}

function iso(ms: number | undefined): string | undefined {
  return ms === undefined
    ? undefined
    : new Date(ms)
        .toISOString()
        .replace(/\.000Z$/, '')
        .replace(/:00$/, '');
}

function schedule(value: string): DisruptionWindow[] {
  const parsed = parseDisruptionSchedule(value);
  if (!parsed.ok) throw new Error(parsed.problem);
  return parsed.windows;
}

function cron(expression: string): CronSchedule {
  const [window] = schedule(`${expression} 1h`);
  if (window === undefined) throw new Error(`no window for ${expression}`);
  return window.cron;
}

function problemOf(result: { ok: true } | { ok: false; problem: string }): string {
  if (result.ok) throw new Error('expected a problem, got ok');
  return result.problem;
}

const range = (from: number, to: number): number[] =>
  Array.from({ length: to - from + 1 }, (_, i) => from + i);

/** A minute-by-minute oracle for the cron rules, independent of the field-jumping search. */
function matches(c: CronSchedule, ms: number): boolean {
  const t = new Date(ms);
  const dom = c.daysOfMonth.includes(t.getUTCDate());
  const dow = c.daysOfWeek.includes(t.getUTCDay());
  const day =
    c.daysOfMonthRestricted && c.daysOfWeekRestricted
      ? dom || dow
      : (!c.daysOfMonthRestricted || dom) && (!c.daysOfWeekRestricted || dow);
  return (
    c.minutes.includes(t.getUTCMinutes()) &&
    c.hours.includes(t.getUTCHours()) &&
    c.months.includes(t.getUTCMonth() + 1) &&
    day
  );
}

describe('lib/api/disruption', () => {
  describe('parseExpireAfter', () => {
    it('treats an absent annotation as no maximum age', () => {
      expect(parseExpireAfter(undefined)).to.deep.equal({ ok: true, ms: undefined });
    });

    const valid: [string, number][] = [
      ['720h', 720 * HOUR],
      ['1h30m', 90 * MINUTE],
      ['90s', 90_000],
      ['500ms', 500],
    ];
    for (const [value, ms] of valid) {
      it(`reads ${JSON.stringify(value)} as ${ms} ms`, () => {
        expect(parseExpireAfter(value)).to.deep.equal({ ok: true, ms });
      });
    }

    const invalid: [string, string][] = [
      ['abc', 'expire-after "abc" is not a Go duration (e.g. 720h)'],
      ['', 'expire-after "" is not a Go duration'],
      ['10', 'expire-after "10" is not a Go duration'],
      ['30d', 'expire-after "30d" is not a Go duration'],
      ['0s', 'expire-after "0s" must be greater than zero'],
      ['0', 'expire-after "0" must be greater than zero'],
      ['-1h', 'expire-after "-1h" must be greater than zero'],
    ];
    for (const [value, problem] of invalid) {
      it(`rejects ${JSON.stringify(value)}`, () => {
        expect(problemOf(parseExpireAfter(value))).to.include(problem);
      });
    }
  });

  describe('parseDisruptionBudget', () => {
    const defaults: [number, number][] = [
      [0, 0],
      [1, 1],
      [10, 1],
      [11, 2],
      [25, 3],
      [100, 10],
    ];
    for (const [replicas, allowed] of defaults) {
      it(`defaults to 10% of ${replicas} replicas rounded up: ${allowed}`, () => {
        expect(parseDisruptionBudget(undefined, replicas)).to.deep.equal({
          ok: true,
          allowed,
          explicit: false,
        });
      });
    }

    const valid: [string, number, number][] = [
      ['2', 10, 2],
      ['0', 10, 0],
      ['5', 3, 5],
      ['0%', 10, 0],
      ['100%', 7, 7],
      ['50%', 3, 2],
      ['33%', 10, 4],
      ['10%', 10, 1],
      ['1%', 1, 1],
      ['25%', 0, 0],
      ['007', 10, 7],
    ];
    for (const [value, replicas, allowed] of valid) {
      it(`allows ${allowed} for ${JSON.stringify(value)} of ${replicas} replicas`, () => {
        expect(parseDisruptionBudget(value, replicas)).to.deep.equal({ ok: true, allowed, explicit: true });
      });
    }

    const invalid: [string, string][] = [
      ['-1', 'disruption-budget "-1" is not a count ("2") or a percentage of replicas ("0%".."100%")'],
      ['1.5', 'disruption-budget "1.5" is not a count'],
      ['2.5%', 'disruption-budget "2.5%" is not a count'],
      ['150%', 'disruption-budget "150%" is above 100%'],
      ['101%', 'disruption-budget "101%" is above 100%'],
      ['', 'disruption-budget "" is not a count'],
      ['two', 'disruption-budget "two" is not a count'],
      ['%', 'disruption-budget "%" is not a count'],
      ['+2', 'disruption-budget "+2" is not a count'],
      ['2 %', 'disruption-budget "2 %" is not a count'],
      ['-10%', 'disruption-budget "-10%" is not a count'],
    ];
    for (const [value, problem] of invalid) {
      it(`rejects ${JSON.stringify(value)}`, () => {
        expect(problemOf(parseDisruptionBudget(value, 10))).to.include(problem);
      });
    }
  });

  describe('parseDisruptionSchedule', () => {
    it('treats an absent annotation as no windows (always open)', () => {
      expect(parseDisruptionSchedule(undefined)).to.deep.equal({ ok: true, windows: [] });
    });

    it('parses windows separated by ";" with their cron, duration and source', () => {
      const windows = schedule('0 2 * * 1-5 4h; 30 22 * * sat,sun 90m');
      expect(windows).to.deep.equal([
        {
          source: '0 2 * * 1-5 4h',
          durationMs: 4 * HOUR,
          cron: {
            source: '0 2 * * 1-5',
            minutes: [0],
            hours: [2],
            daysOfMonth: range(1, 31),
            months: range(1, 12),
            daysOfWeek: [1, 2, 3, 4, 5],
            daysOfMonthRestricted: false,
            daysOfWeekRestricted: true,
          },
        },
        {
          source: '30 22 * * sat,sun 90m',
          durationMs: 90 * MINUTE,
          cron: {
            source: '30 22 * * sat,sun',
            minutes: [30],
            hours: [22],
            daysOfMonth: range(1, 31),
            months: range(1, 12),
            daysOfWeek: [0, 6],
            daysOfMonthRestricted: false,
            daysOfWeekRestricted: true,
          },
        },
      ]);
    });

    it('tolerates extra whitespace inside and around windows', () => {
      const [window] = schedule('  0   2 *\t* *   4h  ');
      expect(window?.source).to.equal('0   2 *\t* *   4h');
      expect(window?.cron.hours).to.deep.equal([2]);
      expect(window?.durationMs).to.equal(4 * HOUR);
    });

    type Field = 'minutes' | 'hours' | 'daysOfMonth' | 'months' | 'daysOfWeek';
    const fields: [string, Field, number[]][] = [
      ['* * * * *', 'minutes', range(0, 59)],
      ['5 * * * *', 'minutes', [5]],
      ['1-3 * * * *', 'minutes', [1, 2, 3]],
      ['10,1,5,5 * * * *', 'minutes', [1, 5, 10]],
      ['*/15 * * * *', 'minutes', [0, 15, 30, 45]],
      ['10-20/5 * * * *', 'minutes', [10, 15, 20]],
      ['50/3 * * * *', 'minutes', [50, 53, 56, 59]],
      ['*/20,7-8 * * * *', 'minutes', [0, 7, 8, 20, 40]],
      ['*/90 * * * *', 'minutes', [0]],
      ['0 * * * *', 'hours', range(0, 23)],
      ['0 */6 * * *', 'hours', [0, 6, 12, 18]],
      ['0 22-23,0-1 * * *', 'hours', [0, 1, 22, 23]],
      ['0 0 1,15,31 * *', 'daysOfMonth', [1, 15, 31]],
      ['0 0 */10 * *', 'daysOfMonth', [1, 11, 21, 31]],
      ['0 0 * * *', 'months', range(1, 12)],
      ['0 0 * jan,JUL,Dec *', 'months', [1, 7, 12]],
      ['0 0 * mar-May *', 'months', [3, 4, 5]],
      ['0 0 * */3 *', 'months', [1, 4, 7, 10]],
      ['0 0 * 2-8/3 *', 'months', [2, 5, 8]],
      ['0 0 * * *', 'daysOfWeek', range(0, 6)],
      ['0 0 * * mon-fri', 'daysOfWeek', [1, 2, 3, 4, 5]],
      ['0 0 * * SAT,sun', 'daysOfWeek', [0, 6]],
      ['0 0 * * 7', 'daysOfWeek', [0]],
      ['0 0 * * 0,7', 'daysOfWeek', [0]],
      ['0 0 * * 5-7', 'daysOfWeek', [0, 5, 6]],
      ['0 0 * * fri-7', 'daysOfWeek', [0, 5, 6]],
      ['0 0 * * 0-7', 'daysOfWeek', range(0, 6)],
      ['0 0 * * */2', 'daysOfWeek', [0, 2, 4, 6]],
      ['0 0 * * 1/2', 'daysOfWeek', [1, 3, 5]],
    ];
    for (const [expression, field, values] of fields) {
      it(`expands ${field} of "${expression}" to [${values.join(',')}]`, () => {
        expect(cron(expression)[field]).to.deep.equal(values);
      });
    }

    const macros: [string, string][] = [
      ['@yearly', '0 0 1 1 *'],
      ['@annually', '0 0 1 1 *'],
      ['@monthly', '0 0 1 * *'],
      ['@weekly', '0 0 * * 0'],
      ['@daily', '0 0 * * *'],
      ['@midnight', '0 0 * * *'],
      ['@hourly', '0 * * * *'],
      ['@DAILY', '0 0 * * *'],
    ];
    for (const [macro, expansion] of macros) {
      it(`expands ${macro} like "${expansion}"`, () => {
        const [window] = schedule(`${macro} 3h`);
        expect(window?.durationMs).to.equal(3 * HOUR);
        expect(window?.cron).to.deep.equal({ ...cron(expansion), source: macro });
      });
    }

    const restriction: [string, boolean, boolean][] = [
      ['0 0 * * *', false, false],
      ['0 0 1 * *', true, false],
      ['0 0 * * mon', false, true],
      ['0 0 13 * fri', true, true],
      ['0 0 */2 * *', true, false],
      ['0 0 1-31 * *', true, false],
    ];
    for (const [expression, dom, dow] of restriction) {
      it(`marks "${expression}" as day-of-month ${dom ? '' : 'un'}restricted, day-of-week ${dow ? '' : 'un'}restricted`, () => {
        const c = cron(expression);
        expect([c.daysOfMonthRestricted, c.daysOfWeekRestricted]).to.deep.equal([dom, dow]);
      });
    }

    const invalid: [string, string[]][] = [
      ['', ['disruption-schedule is empty']],
      ['   ', ['disruption-schedule is empty']],
      ['0 2 * * * 4h;', ['disruption-schedule window 2 is empty']],
      ['0 2 * * * 4h;; 0 3 * * * 1h', ['disruption-schedule window 2 is empty']],
      ['0 2 * * *', ['window "0 2 * * *"', 'duration "*" is not a Go duration (e.g. 4h)']],
      ['0 2 * * * 0s', ['window "0 2 * * * 0s"', 'duration "0s" must be greater than zero']],
      ['0 2 * * * -1h', ['duration "-1h" must be greater than zero']],
      ['0 2 * * * 4 h', ['duration "h" is not a Go duration']],
      ['4h', ['window "4h"', 'expected a 5-field cron expression']],
      ['0 2 * * 4h', ['window "0 2 * * 4h"', 'got 4 cron fields']],
      ['0 2 * * * * 4h', ['got 6 cron fields']],
      ['60 2 * * * 4h', ['window "60 2 * * * 4h"', 'minute "60" has 60, outside 0-59']],
      ['0 24 * * * 4h', ['hour "24" has 24, outside 0-23']],
      ['0 0 0 * * 4h', ['day-of-month "0" has 0, outside 1-31']],
      ['0 0 32 * * 4h', ['day-of-month "32" has 32, outside 1-31']],
      ['0 0 * 0 * 4h', ['month "0" has 0, outside 1-12']],
      ['0 0 * 13 * 4h', ['month "13" has 13, outside 1-12']],
      ['0 0 * * 8 4h', ['day-of-week "8" has 8, outside 0-7']],
      ['0 0 * * 5-2 4h', ['day-of-week "5-2" has range "5-2", which runs backwards']],
      ['0 0 * * sat-sun 4h', ['day-of-week "sat-sun" has range "sat-sun", which runs backwards']],
      ['*/0 * * * * 4h', ['minute "*/0" has step "0"', 'at least 1']],
      ['*/x * * * * 4h', ['minute "*/x" has step "x"']],
      ['*/ * * * * 4h', ['minute "*/" has step ""']],
      ['*/5/2 * * * * 4h', ['minute "*/5/2" has "*/5/2" with more than one step']],
      ['1,,2 * * * * 4h', ['minute "1,,2" has an empty list item']],
      ['1-2-3 * * * * 4h', ['minute "1-2-3" has "1-2-3", which is not a range a-b']],
      ['-5 * * * * 4h', ['minute "-5" has "", which is not a number']],
      ['mon 0 * * * 4h', ['minute "mon" has "mon", which is not a number']],
      ['0 0 * foo * 4h', ['month "foo" has "foo", which is not a number or a name jan-dec']],
      ['0 0 * * funday 4h', ['day-of-week "funday" has "funday", which is not a number or a name sun-sat']],
      ['0 0 * jan-mon * 4h', ['month "jan-mon" has "mon"']],
      ['0 0 1.5 * * 4h', ['day-of-month "1.5"']],
      ['@often 4h', ['window "@often 4h"', 'unknown macro "@often"']],
      ['@daily 0 4h', ['window "@daily 0 4h"', 'expected a 5-field cron expression']],
      ['0 2 * * * 4h; 0 25 * * * 1h', ['window "0 25 * * * 1h"', 'hour "25" has 25, outside 0-23']],
    ];
    for (const [value, problems] of invalid) {
      it(`rejects ${JSON.stringify(value)}`, () => {
        const problem = problemOf(parseDisruptionSchedule(value));
        for (const part of problems) expect(problem).to.include(part);
      });
    }
  });

  describe('nextFire', () => {
    const cases: [string, string, string | undefined][] = [
      ['0 2 * * *', '2025-01-01T01:59', '2025-01-01T02:00'],
      // Strictly after: a fire at afterMs itself does not count.
      ['0 2 * * *', '2025-01-01T02:00', '2025-01-02T02:00'],
      ['* * * * *', '2025-01-01T02:00:30', '2025-01-01T02:01'],
      ['* * * * *', '2025-01-01T02:00:59.999', '2025-01-01T02:01'],
      ['0 0 * * *', '2025-01-31T12:00', '2025-02-01T00:00'],
      ['59 23 * * *', '2025-12-31T23:59', '2026-01-01T23:59'],
      ['30 23 31 12 *', '2025-12-31T23:30', '2026-12-31T23:30'],
      ['@yearly', '2025-06-01T00:00', '2026-01-01T00:00'],
      ['0 12 31 * *', '2025-04-01T00:00', '2025-05-31T12:00'],
      ['0 0 31 * *', '2025-01-31T00:00', '2025-03-31T00:00'],
      ['0 0 30 * *', '2025-01-30T00:00', '2025-03-30T00:00'],
      // Feb 29 only exists in leap years, and 2100 is not one.
      ['0 0 29 2 *', '2024-01-15T00:00', '2024-02-29T00:00'],
      ['0 0 29 2 *', '2024-02-28T23:59', '2024-02-29T00:00'],
      ['0 0 29 2 *', '2025-03-01T00:00', '2028-02-29T00:00'],
      ['0 0 29 2 *', '2096-03-01T00:00', '2104-02-29T00:00'],
      ['0 0 * * *', '2024-02-28T00:00', '2024-02-29T00:00'],
      ['0 0 * * *', '2025-02-28T00:00', '2025-03-01T00:00'],
      ['0 0 30 2 *', '2025-01-01T00:00', undefined],
      ['0 0 31 4,6,9,11 *', '2025-01-01T00:00', undefined],
      // 2025-01-01 is a Wednesday.
      ['0 9 * * mon', '2025-01-01T00:00', '2025-01-06T09:00'],
      ['0 9 * * 7', '2025-01-01T00:00', '2025-01-05T09:00'],
      ['0 9 * * sun', '2025-01-01T00:00', '2025-01-05T09:00'],
      ['0 9 * * 0', '2025-01-05T09:00', '2025-01-12T09:00'],
      ['0 9 * * 1-5', '2025-01-03T10:00', '2025-01-06T09:00'],
      ['0 9 * * sat', '2025-12-28T00:00', '2026-01-03T09:00'],
      // Both day fields restricted: the 13th or any Friday (2025-06-06 is a Friday).
      ['0 0 13 * fri', '2025-06-01T00:00', '2025-06-06T00:00'],
      ['0 0 13 * fri', '2025-06-06T00:00', '2025-06-13T00:00'],
      ['0 0 13 * fri', '2025-06-13T00:00', '2025-06-20T00:00'],
      ['0 0 1 * mon', '2025-01-01T00:00', '2025-01-06T00:00'],
      // Only one day field restricted: that one alone decides.
      ['0 0 13 * *', '2025-06-01T00:00', '2025-06-13T00:00'],
      ['0 0 * 6 fri', '2025-01-01T00:00', '2025-06-06T00:00'],
      ['*/20 */6 * * *', '2025-01-01T06:41', '2025-01-01T12:00'],
      ['*/20 */6 * * *', '2025-01-01T18:40', '2025-01-02T00:00'],
      ['0 0 1 jan,jul *', '2025-02-01T00:00', '2025-07-01T00:00'],
      ['15 10 * * *', '2025-03-10T10:14:59', '2025-03-10T10:15'],
    ];
    for (const [expression, after, expected] of cases) {
      it(`fires "${expression}" after ${after} at ${expected ?? 'never'}`, () => {
        expect(iso(nextFire(cron(expression), at(after)))).to.equal(expected);
      });
    }

    it('returns undefined when the next fire comes after the limit', () => {
      const c = cron('0 0 29 2 *');
      expect(nextFire(c, at('2025-03-01T00:00'), at('2028-02-28T23:59'))).to.equal(undefined);
      expect(iso(nextFire(c, at('2025-03-01T00:00'), at('2028-02-29T00:00')))).to.equal('2028-02-29T00:00');
    });
  });

  describe('prevFire', () => {
    const cases: [string, string, string | undefined][] = [
      // At or before: a fire at the instant itself counts.
      ['0 2 * * *', '2025-01-01T02:00', '2025-01-01T02:00'],
      ['0 2 * * *', '2025-01-01T02:00:59', '2025-01-01T02:00'],
      ['0 2 * * *', '2025-01-01T01:59', '2024-12-31T02:00'],
      ['0 0 1 * *', '2025-03-31T23:59', '2025-03-01T00:00'],
      ['0 0 31 * *', '2025-03-30T00:00', '2025-01-31T00:00'],
      ['0 0 29 2 *', '2025-01-01T00:00', '2024-02-29T00:00'],
      ['0 0 29 2 *', '2104-01-01T00:00', '2096-02-29T00:00'],
      ['0 0 13 * fri', '2025-06-12T00:00', '2025-06-06T00:00'],
      ['0 9 * * 7', '2025-01-04T00:00', '2024-12-29T09:00'],
      ['*/20 */6 * * *', '2025-01-01T05:59', '2025-01-01T00:40'],
      ['0 0 30 2 *', '2025-01-01T00:00', undefined],
    ];
    for (const [expression, atOrBefore, expected] of cases) {
      it(`finds the last fire of "${expression}" at or before ${atOrBefore}: ${expected ?? 'none'}`, () => {
        expect(iso(prevFire(cron(expression), at(atOrBefore)))).to.equal(expected);
      });
    }

    it('returns undefined when the last fire came before the lower bound', () => {
      const c = cron('0 2 * * *');
      expect(prevFire(c, at('2025-01-01T01:59'), at('2024-12-31T02:01'))).to.equal(undefined);
      expect(iso(prevFire(c, at('2025-01-01T01:59'), at('2024-12-31T02:00')))).to.equal('2024-12-31T02:00');
    });
  });

  describe('nextFire and prevFire against a minute-by-minute scan', () => {
    const expressions = [
      '0 0 29 2 *',
      '*/7 3-5,22 * * *',
      '0 12 13 * fri',
      '45 23 * * sun',
      '0 0 28-31 * *',
      '30 1 1,15 jan-mar 1-5',
      '*/13 * * 2 *',
    ];
    // 2024-01-20 .. 2024-03-20 crosses a leap day and two month ends.
    const start = at('2024-01-20T00:00');
    const end = at('2024-03-20T00:00');
    for (const expression of expressions) {
      it(`agrees for "${expression}"`, () => {
        const c = cron(expression);
        const fires: number[] = [];
        for (let t = start; t <= end; t += MINUTE) if (matches(c, t)) fires.push(t);
        expect(fires.length).to.be.greaterThan(0);
        // Instants off the minute grid, 97 minutes and 13 seconds apart.
        for (let t = start + 13_000; t < end; t += 97 * MINUTE + 13_000) {
          const next = fires.find((f) => f > t);
          const prev = fires.findLast((f) => f <= t);
          if (next !== undefined) expect(iso(nextFire(c, t)), `next after ${iso(t)}`).to.equal(iso(next));
          if (prev !== undefined) expect(iso(prevFire(c, t)), `prev at ${iso(t)}`).to.equal(iso(prev));
        }
      });
    }
  });

  describe('windowState', () => {
    it('is always open without windows', () => {
      expect(windowState([], at('2025-01-01T00:00'))).to.deep.equal({ open: true, changesAt: undefined });
    });

    const cases: [string, string, boolean, string | undefined][] = [
      ['0 2 * * * 4h', '2025-01-01T01:59', false, '2025-01-01T02:00'],
      ['0 2 * * * 4h', '2025-01-01T02:00', true, '2025-01-01T06:00'],
      ['0 2 * * * 4h', '2025-01-01T05:59', true, '2025-01-01T06:00'],
      ['0 2 * * * 4h', '2025-01-01T05:59:59.999', true, '2025-01-01T06:00'],
      ['0 2 * * * 4h', '2025-01-01T06:00', false, '2025-01-02T02:00'],
      // A window that opened the day before.
      ['0 23 * * * 4h', '2025-01-01T01:00', true, '2025-01-01T03:00'],
      ['0 2 * * * 90s', '2025-01-01T02:01:29', true, '2025-01-01T02:01:30'],
      ['0 2 * * * 90s', '2025-01-01T02:01:30', false, '2025-01-02T02:00'],
      // Weekdays only: Friday 2025-01-03, then Monday 2025-01-06.
      ['0 2 * * 1-5 4h', '2025-01-03T03:00', true, '2025-01-03T06:00'],
      ['0 2 * * 1-5 4h', '2025-01-03T07:00', false, '2025-01-06T02:00'],
      // Sunday 22:30 + 90m runs into Monday; next opens Saturday 2025-01-11.
      ['30 22 * * sat,sun 90m', '2025-01-05T23:30', true, '2025-01-06T00:00'],
      ['30 22 * * sat,sun 90m', '2025-01-06T00:00', false, '2025-01-11T22:30'],
      // Several windows.
      ['0 2 * * * 1h; 0 4 * * * 1h', '2025-01-01T02:30', true, '2025-01-01T03:00'],
      ['0 2 * * * 1h; 0 4 * * * 1h', '2025-01-01T03:00', false, '2025-01-01T04:00'],
      ['0 4 * * * 1h; 0 2 * * * 1h', '2025-01-01T01:00', false, '2025-01-01T02:00'],
      // Back to back and overlapping windows chain into one.
      ['0 2 * * * 2h; 0 4 * * * 2h', '2025-01-01T03:00', true, '2025-01-01T06:00'],
      ['0 4 * * * 2h; 0 2 * * * 2h', '2025-01-01T03:00', true, '2025-01-01T06:00'],
      ['0 2 * * * 2h; 0 4 * * * 1h', '2025-01-01T02:00', true, '2025-01-01T05:00'],
      ['0 2 * * * 3h; 0 4 * * * 3h', '2025-01-01T02:30', true, '2025-01-01T07:00'],
      [
        '0 6 * * * 1h; 30 0 * * * 1h; 0 1 * * * 1h; 0 0 * * * 1h',
        '2025-01-01T00:10',
        true,
        '2025-01-01T02:00',
      ],
      ['0 2 * * * 6h; 0 3 * * * 1h', '2025-01-01T03:30', true, '2025-01-01T08:00'],
      // One window chaining with itself.
      ['0 0-5 * * * 1h', '2025-01-01T00:30', true, '2025-01-01T06:00'],
      ['0 0-5 * * * 1h', '2025-01-01T06:30', false, '2025-01-02T00:00'],
      ['0 0 * * 1-3 24h', '2025-01-06T00:00', true, '2025-01-09T00:00'],
      ['*/5 * * * * 4m', '2025-01-01T00:03', true, '2025-01-01T00:04'],
      ['*/5 * * * * 4m', '2025-01-01T00:04', false, '2025-01-01T00:05'],
      ['*/5 9-10 * * * 5m', '2025-01-01T09:17', true, '2025-01-01T11:00'],
      ['0,50 * * * * 15m', '2025-01-01T09:55', true, '2025-01-01T10:15'],
      ['0,50 * * * * 15m', '2025-01-01T10:15', false, '2025-01-01T10:50'],
      ['50 23 * * * 20m; 0 0 * * * 5m', '2025-01-01T23:55', true, '2025-01-02T00:10'],
      ['0 0 1 * * 144h', '2025-01-02T00:00', true, '2025-01-07T00:00'],
      // Open beyond the 7-day horizon (or for ever): no close time.
      ['* * * * * 24h', '2025-01-01T12:34:56', true, undefined],
      ['* * * * * 1m', '2025-01-01T12:34:56', true, undefined],
      ['0 */2 * * * 3h', '2025-01-01T12:34', true, undefined],
      ['0 0 * * * 24h', '2025-01-01T12:00', true, undefined],
      ['0 0 1 * * 192h', '2025-01-01T00:00', true, undefined],
      ['0 * * * * 30m; 30 * * * * 30m', '2025-01-01T00:00', true, undefined],
      // Rare or impossible windows.
      ['0 0 29 2 * 1h', '2025-01-01T00:00', false, '2028-02-29T00:00'],
      ['0 0 29 2 * 1h', '2028-02-29T00:30', true, '2028-02-29T01:00'],
      ['0 0 30 2 * 1h', '2025-01-01T00:00', false, undefined],
      ['0 0 30 2 * 1h; 0 5 * * * 1h', '2025-01-01T00:00', false, '2025-01-01T05:00'],
    ];
    for (const [value, now, open, changesAt] of cases) {
      it(`is ${open ? 'open' : 'closed'} for "${value}" at ${now}, changing at ${changesAt ?? 'no known time'}`, () => {
        const state = windowState(schedule(value), at(now));
        expect({ open: state.open, changesAt: iso(state.changesAt) }).to.deep.equal({ open, changesAt });
      });
    }

    const invariants = [
      '0 2 * * 1-5 4h; 30 22 * * sat,sun 90m',
      '*/10 8-9 * * * 7m; 0 10 * * * 2h',
      '0 0 13 * fri 36h',
      '@hourly 30m; 45 * * * * 20m',
    ];
    for (const value of invariants) {
      it(`flips state exactly at changesAt for "${value}"`, () => {
        const windows = schedule(value);
        for (let now = at('2025-01-01T00:00'); now < at('2025-01-15T00:00'); now += 53 * MINUTE + 7_000) {
          const state = windowState(windows, now);
          if (state.changesAt === undefined) continue;
          expect(state.changesAt, `at ${iso(now)}`).to.be.greaterThan(now);
          expect(
            windowState(windows, state.changesAt - 1).open,
            `just before ${iso(state.changesAt)}`,
          ).to.equal(state.open);
          expect(windowState(windows, state.changesAt).open, `at ${iso(state.changesAt)}`).to.equal(
            !state.open,
          );
        }
      });
    }
  });
});
