#!/usr/bin/env node
/**
 * machine-controller-manager: flags → configuration → Manager; SIGTERM/SIGINT shut it down
 * gracefully (controllers drain, the leader Lease is released).
 */
import { ConfigError, parseArgs, usage } from '../lib/config.js';
import { Manager } from '../lib/manager.js';
import { createLogger } from '../lib/observability/logger.js';
import { tuneRuntime } from '../lib/runtime.js';

async function main(): Promise<number> {
  tuneRuntime();
  let config;
  try {
    config = parseArgs(process.argv.slice(2));
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`error: ${err.message}\n\n${usage()}\n`);
      return 2;
    }
    throw err;
  }
  if (config === 'help') {
    process.stdout.write(`${usage()}\n`);
    return 0;
  }
  const logger = createLogger({ verbosity: config.verbosity, format: config.logFormat });
  const manager = new Manager(config, {
    logger,
    onLeadershipLost: () => {
      logger.error('leader election lost; exiting');
      process.exit(1);
    },
  });
  let stopping = false;
  const shutdown = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    logger.info('signal received, shutting down', { signal });
    const force = setTimeout(() => {
      logger.error('graceful shutdown took too long; exiting');
      process.exit(1);
    }, 30_000);
    force.unref();
    manager.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error('shutdown failed', { err });
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => {
    shutdown('SIGTERM');
  });
  process.on('SIGINT', () => {
    shutdown('SIGINT');
  });
  try {
    await manager.start();
  } catch (err) {
    logger.error('start-up failed', { err });
    await manager.stop().catch(() => undefined);
    return 1;
  }
  return -1; // keep running until a signal arrives
}

main().then(
  (code) => {
    if (code >= 0) process.exit(code);
  },
  (err: unknown) => {
    process.stderr.write(`fatal: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
