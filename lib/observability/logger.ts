import winston from 'winston';

/** Structured fields attached to a log line (object references as {name, namespace}, errors as err). */
export type LogFields = Record<string, unknown>;

/**
 * The logging seam used everywhere in lib/. Verbosity follows klog's `--v`: error, warn and info
 * are always written; verbose needs --v>=3, debug --v>=4, trace --v>=5. Every line carries "v".
 */
export interface Logger {
  error(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  verbose(msg: string, fields?: LogFields): void;
  debug(msg: string, fields?: LogFields): void;
  trace(msg: string, fields?: LogFields): void;
  child(fields: LogFields): Logger;
}

const levels = { error: 0, warn: 1, info: 2, verbose: 3, debug: 4, trace: 5 } as const;
type Level = keyof typeof levels;

const vOf: Record<Level, number> = { error: 0, warn: 0, info: 2, verbose: 3, debug: 4, trace: 5 };

/** Maps a klog-style --v value to the most verbose level that is written. */
export function levelForVerbosity(v: number): Level {
  if (v >= 5) return 'trace';
  if (v >= 4) return 'debug';
  if (v >= 3) return 'verbose';
  return 'info';
}

export interface LoggerOptions {
  verbosity: number;
  format?: 'json' | 'text';
  /** Where lines go; defaults to stderr. */
  stream?: NodeJS.WritableStream;
}

function serialiseErrors(fields: LogFields | undefined): LogFields | undefined {
  if (fields === undefined) return undefined;
  let out: LogFields | undefined;
  for (const [k, val] of Object.entries(fields)) {
    if (val instanceof Error) {
      out ??= { ...fields };
      out[k] = val.message;
      if (k === 'err' && val.stack !== undefined && process.env.MCM_LOG_STACKS === '1') out.stack = val.stack;
    }
  }
  return out ?? fields;
}

class WinstonLogger implements Logger {
  constructor(private readonly w: winston.Logger) {}

  private write(level: Level, msg: string, fields?: LogFields): void {
    if (!this.w.isLevelEnabled(level)) return;
    this.w.log(level, msg, { v: vOf[level], ...serialiseErrors(fields) });
  }

  error(msg: string, fields?: LogFields): void {
    this.write('error', msg, fields);
  }
  warn(msg: string, fields?: LogFields): void {
    this.write('warn', msg, fields);
  }
  info(msg: string, fields?: LogFields): void {
    this.write('info', msg, fields);
  }
  verbose(msg: string, fields?: LogFields): void {
    this.write('verbose', msg, fields);
  }
  debug(msg: string, fields?: LogFields): void {
    this.write('debug', msg, fields);
  }
  trace(msg: string, fields?: LogFields): void {
    this.write('trace', msg, fields);
  }
  child(fields: LogFields): Logger {
    return new WinstonLogger(this.w.child(fields));
  }
}

/** Creates the process logger: JSON lines with time, level, v, msg and context fields. */
export function createLogger(opts: LoggerOptions): Logger {
  const { timestamp, errors, json, printf, combine } = winston.format;
  const text = printf((info) => {
    const { level, message, timestamp: ts, v: _v, ...rest } = info;
    const extra = Object.keys(rest).length > 0 ? ' ' + JSON.stringify(rest) : '';
    return `${String(ts)} ${level.toUpperCase()} ${String(message)}${extra}`;
  });
  const w = winston.createLogger({
    levels,
    level: levelForVerbosity(opts.verbosity),
    format: combine(timestamp(), errors({ stack: false }), opts.format === 'text' ? text : json()),
    transports: [
      // winston's typings declare its Stream transport apart from TransportStream; it is one.
      // eslint-disable-next-line @typescript-eslint/no-unsafe-class-instance-assignment
      new winston.transports.Stream({ stream: opts.stream ?? process.stderr }),
    ],
  });
  return new WinstonLogger(w);
}

/** A logger that drops everything (unit tests). */
export const nullLogger: Logger = {
  error: () => undefined,
  warn: () => undefined,
  info: () => undefined,
  verbose: () => undefined,
  debug: () => undefined,
  trace: () => undefined,
  child: () => nullLogger,
};

export interface CapturedLine {
  level: Level;
  msg: string;
  fields: LogFields;
}

/** A logger that records lines in memory, for tests that assert on logging. */
export class CapturingLogger implements Logger {
  constructor(
    readonly lines: CapturedLine[] = [],
    private readonly base: LogFields = {},
  ) {}
  private add(level: Level, msg: string, fields?: LogFields): void {
    this.lines.push({ level, msg, fields: { ...this.base, ...fields } });
  }
  error(msg: string, fields?: LogFields): void {
    this.add('error', msg, fields);
  }
  warn(msg: string, fields?: LogFields): void {
    this.add('warn', msg, fields);
  }
  info(msg: string, fields?: LogFields): void {
    this.add('info', msg, fields);
  }
  verbose(msg: string, fields?: LogFields): void {
    this.add('verbose', msg, fields);
  }
  debug(msg: string, fields?: LogFields): void {
    this.add('debug', msg, fields);
  }
  trace(msg: string, fields?: LogFields): void {
    this.add('trace', msg, fields);
  }
  child(fields: LogFields): Logger {
    return new CapturingLogger(this.lines, { ...this.base, ...fields });
  }
}
