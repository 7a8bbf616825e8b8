import { expect } from 'chai';

import { MachineError, decodeMachineError, formatMachineError } from '../../../lib/driver/codes.js';
import {
  createRetryClass,
  deleteRetryClass,
  deletionStatusRetryClass,
  retryDelay,
  RetryPeriod,
} from '../../../lib/driver/retry.js';

describe('lib/driver/codes', () => {
  it('formats errors in MCM’s machine-codes format', () => {
    expect(formatMachineError('ResourceExhausted', 'zone full')).to.equal(
      'machine codes error: code = [ResourceExhausted] message = [zone full]',
    );
    const e = new MachineError('NotFound', 'no VM');
    expect(e.message).to.equal('machine codes error: code = [NotFound] message = [no VM]');
    expect(e.numericCode).to.equal(5);
  });

  const cases: [string, unknown, { code: string; message: string; ok: boolean }][] = [
    [
      'a MachineError as is',
      new MachineError('Uninitialized', 'booting'),
      { code: 'Uninitialized', message: 'booting', ok: true },
    ],
    [
      'a formatted string',
      'machine codes error: code = [Unavailable] message = [try later]',
      { code: 'Unavailable', message: 'try later', ok: true },
    ],
    [
      'nested brackets in the message stay balanced',
      new Error('machine codes error: code = [Internal] message = [bad [inner [deep]] value] trailing [x]'),
      { code: 'Internal', message: 'bad [inner [deep]] value', ok: true },
    ],
    [
      'an unknown code name maps to Unknown',
      new Error('machine codes error: code = [Bogus] message = [m]'),
      { code: 'Unknown', message: 'm', ok: true },
    ],
    [
      'a wrapped error keeps its code',
      new Error('driver call failed: machine codes error: code = [NotFound] message = [gone]'),
      { code: 'NotFound', message: 'gone', ok: true },
    ],
    [
      'a plain error is Unknown and not ok',
      new Error('boom'),
      { code: 'Unknown', message: 'boom', ok: false },
    ],
    ['a non-error is Unknown and not ok', 42, { code: 'Unknown', message: '42', ok: false }],
  ];
  for (const [name, input, want] of cases) {
    it(`decodes ${name}`, () => {
      expect(decodeMachineError(input)).to.deep.equal(want);
    });
  }
});

describe('lib/driver/retry', () => {
  const table: [string, string, string, string][] = [
    // code, create, delete, deletion status
    ['ResourceExhausted', 'resource-exhausted', 'long', 'medium'],
    ['Unknown', 'short', 'short', 'short'],
    ['DeadlineExceeded', 'short', 'short', 'short'],
    ['Aborted', 'short', 'short', 'short'],
    ['Unavailable', 'short', 'short', 'short'],
    ['InvalidArgument', 'medium', 'long', 'medium'],
    ['Internal', 'medium', 'long', 'medium'],
  ];
  for (const [code, create, del, status] of table) {
    it(`classifies ${code}: create ${create}, delete ${del}, deletion status ${status}`, () => {
      expect(createRetryClass(code as never)).to.equal(create);
      expect(deleteRetryClass(code as never)).to.equal(del);
      expect(deletionStatusRetryClass(code as never)).to.equal(status);
    });
  }

  it('maps classes to MCM’s periods, the resource-exhausted one from its flag (0 means 10m)', () => {
    expect(retryDelay('short', 0)).to.equal(RetryPeriod.Short);
    expect(retryDelay('medium', 0)).to.equal(3 * 60_000);
    expect(retryDelay('long', 0)).to.equal(10 * 60_000);
    expect(retryDelay('resource-exhausted', 120_000)).to.equal(120_000);
    expect(retryDelay('resource-exhausted', 0)).to.equal(10 * 60_000);
  });
});
