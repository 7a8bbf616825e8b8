import { expect } from 'chai';

import {
  IntOrStringError,
  isValidIntOrPercent,
  isZeroIntOrPercent,
  parseIntOrPercent,
  resolveFenceposts,
  scaledValue,
} from '../../../lib/api/intstr.js';
import type { IntOrString } from '../../../lib/api/types.js';

describe('lib/api/intstr', () => {
  describe('parseIntOrPercent', () => {
    const valid: [IntOrString, number, boolean][] = [
      [0, 0, false],
      [5, 5, false],
      [-2, -2, false],
      ['25%', 25, true],
      ['0%', 0, true],
      ['100%', 100, true],
      ['007%', 7, true],
      // strconv.Atoi accepts a sign, so Kubernetes does too.
      ['+5%', 5, true],
      ['-5%', -5, true],
    ];
    for (const [input, value, isPercent] of valid) {
      it(`parses ${JSON.stringify(input)} as ${value}${isPercent ? '%' : ''}`, () => {
        expect(parseIntOrPercent(input)).to.deep.equal({ value, isPercent });
      });
    }

    const invalid: IntOrString[] = ['5', '', '%', 'abc%', '2.5%', ' 5%', '5 %', '5%%', 1.5, Number.NaN];
    for (const input of invalid) {
      it(`rejects ${JSON.stringify(input)} like Kubernetes' safe parser`, () => {
        expect(() => parseIntOrPercent(input)).to.throw(IntOrStringError);
        expect(isValidIntOrPercent(input)).to.equal(false);
      });
    }

    it('names the reason when a string lacks the percent sign', () => {
      expect(() => parseIntOrPercent('5')).to.throw('string is not a percentage');
    });
  });

  describe('isZeroIntOrPercent', () => {
    const cases: [IntOrString, boolean][] = [
      [0, true],
      ['0%', true],
      ['00%', true],
      [1, false],
      ['1%', false],
      ['0', false],
    ];
    for (const [input, zero] of cases) {
      it(`treats ${JSON.stringify(input)} as ${zero ? 'zero' : 'not zero'}`, () => {
        expect(isZeroIntOrPercent(input)).to.equal(zero);
      });
    }
  });

  describe('scaledValue', () => {
    const cases: [IntOrString, number, boolean, number][] = [
      ['25%', 10, true, 3],
      ['25%', 10, false, 2],
      ['50%', 3, true, 2],
      ['50%', 3, false, 1],
      ['100%', 7, false, 7],
      ['1%', 1, true, 1],
      ['1%', 1, false, 0],
      ['0%', 100, true, 0],
      ['30%', 0, true, 0],
      [4, 10, true, 4],
      [4, 10, false, 4],
      // absolute values are never capped by the total
      [15, 10, false, 15],
      ['-10%', 5, true, 0],
      ['-10%', 15, false, -2],
    ];
    for (const [value, total, roundUp, expected] of cases) {
      it(`resolves ${JSON.stringify(value)} of ${total} rounded ${roundUp ? 'up' : 'down'} to ${expected}`, () => {
        const result = scaledValue(value, total, roundUp);
        expect(result).to.equal(expected);
        expect(Object.is(result, -0)).to.equal(false);
      });
    }

    it('rejects a missing value', () => {
      expect(() => scaledValue(undefined, 10, true)).to.throw(IntOrStringError, 'nil value');
    });

    it('rejects an integer string without percent sign', () => {
      expect(() => scaledValue('5', 10, true)).to.throw(IntOrStringError);
    });
  });

  describe('resolveFenceposts (MCM rolling-update bounds)', () => {
    const cases: [IntOrString, IntOrString, number, number, number][] = [
      // maxSurge, maxUnavailable, desired => surge, unavailable
      [1, 0, 3, 1, 0],
      [0, 1, 3, 0, 1],
      ['25%', '25%', 10, 3, 2],
      ['25%', '25%', 1, 1, 0],
      ['25%', '25%', 4, 1, 1],
      ['10%', '10%', 5, 1, 0],
      ['100%', '0%', 3, 3, 0],
      [2, 3, 10, 2, 3],
      // both zero: one machine may be unavailable so the rollout can progress
      [0, 0, 5, 0, 1],
      ['0%', '0%', 5, 0, 1],
      ['0%', 0, 5, 0, 1],
      // percentages that round to zero count as zero too
      ['0%', '10%', 5, 0, 1],
      // zero replicas
      ['25%', '25%', 0, 0, 1],
    ];
    for (const [surge, unavailable, desired, wantSurge, wantUnavailable] of cases) {
      it(`maxSurge=${JSON.stringify(surge)} maxUnavailable=${JSON.stringify(unavailable)} for ${desired} replicas gives ${wantSurge}/${wantUnavailable}`, () => {
        expect(resolveFenceposts(surge, unavailable, desired)).to.deep.equal({
          maxSurge: wantSurge,
          maxUnavailable: wantUnavailable,
        });
      });
    }

    it('fails when maxSurge is missing', () => {
      expect(() => resolveFenceposts(undefined, 1, 3)).to.throw(IntOrStringError);
    });

    it('fails when maxUnavailable is malformed', () => {
      expect(() => resolveFenceposts(1, '1', 3)).to.throw(IntOrStringError);
    });
  });
});
