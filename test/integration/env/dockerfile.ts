import { cpSync, existsSync, mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';

import { run } from './chart.js';

/** One Dockerfile instruction, continuation lines joined. */
export interface Instruction {
  op: string;
  args: string;
}

export interface Stage {
  from: string;
  name: string | undefined;
  instructions: Instruction[];
}

/** Parses a Dockerfile into stages (comments dropped, `\` continuations joined). */
export function parseDockerfile(text: string): { args: Record<string, string>; stages: Stage[] } {
  const lines: string[] = [];
  let cur = '';
  for (const raw of text.split('\n')) {
    const line = raw.trimEnd();
    if (cur === '' && (line.trim() === '' || line.trim().startsWith('#'))) continue;
    if (line.endsWith('\\')) {
      cur += `${line.slice(0, -1)} `;
      continue;
    }
    lines.push((cur + line).trim());
    cur = '';
  }
  const args: Record<string, string> = {};
  const stages: Stage[] = [];
  for (const l of lines) {
    const m = /^(\S+)\s+(.*)$/.exec(l);
    if (m?.[1] === undefined || m[2] === undefined) throw new Error(`cannot parse Dockerfile line: ${l}`);
    const op = m[1].toUpperCase();
    const rest = m[2];
    if (op === 'FROM') {
      const f = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(rest);
      stages.push({ from: f?.[1] ?? rest, name: f?.[2], instructions: [] });
      continue;
    }
    const stage = stages[stages.length - 1];
    if (stage === undefined) {
      if (op !== 'ARG') throw new Error(`${op} before the first FROM`);
      const a = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(rest);
      if (a?.[1] !== undefined && a[2] !== undefined) args[a[1]] = a[2];
      continue;
    }
    stage.instructions.push({ op, args: rest });
  }
  return { args, stages };
}

/** Go filepath.Match-style pattern (with `**`) to a regular expression over slash paths. */
function patternRegex(pattern: string): RegExp {
  let re = '';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern.charAt(i);
    if (c === '*' && pattern.charAt(i + 1) === '*') {
      re += '.*';
      i++;
      if (pattern.charAt(i + 1) === '/') i++;
    } else if (c === '*') re += '[^/]*';
    else if (c === '?') re += '[^/]';
    else re += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  return new RegExp(`^${re}$`);
}

/**
 * Files of the build context that .dockerignore lets through, with Docker's rules: patterns in
 * order, the last match wins, `!` re-includes, and a pattern that matches a parent directory
 * matches everything below it.
 */
export function dockerContextFiles(root: string): string[] {
  const ignoreFile = path.join(root, '.dockerignore');
  const rules = existsSync(ignoreFile)
    ? readFileSync(ignoreFile, 'utf8')
        .split('\n')
        .map((l) => l.trim())
        .filter((l) => l !== '' && !l.startsWith('#'))
        .map((l) => {
          const negate = l.startsWith('!');
          const p = path.posix.normalize((negate ? l.slice(1) : l).replace(/^\/+/, '')).replace(/\/+$/, '');
          return { negate, re: patternRegex(p) };
        })
    : [];
  const excluded = (rel: string): boolean => {
    const parts = rel.split('/');
    let out = false;
    for (const r of rules) {
      for (let i = 1; i <= parts.length; i++) {
        if (r.re.test(parts.slice(0, i).join('/'))) {
          out = !r.negate;
          break;
        }
      }
    }
    return out;
  };
  const files: string[] = [];
  const walk = (rel: string): void => {
    for (const name of readdirSync(path.join(root, rel))) {
      const child = rel === '' ? name : `${rel}/${name}`;
      if (child === '.git' || child === 'node_modules' || child === 'dist') {
        if (!excluded(child)) throw new Error(`.dockerignore lets ${child}/ into the build context`);
        continue;
      }
      if (statSync(path.join(root, child)).isDirectory()) walk(child);
      else if (!excluded(child)) files.push(child);
    }
  };
  walk('');
  return files.sort();
}

/** Copies the files dockerContextFiles() lists into dir. */
export function materializeContext(root: string, dir: string): void {
  for (const f of dockerContextFiles(root)) {
    mkdirSync(path.dirname(path.join(dir, f)), { recursive: true });
    cpSync(path.join(root, f), path.join(dir, f));
  }
}

export interface StageResult {
  root: string;
  workdir: string;
  env: Record<string, string>;
  user: string | undefined;
  entrypoint: string[] | undefined;
  log: string;
}

/** Directories of an image a RUN command may name; the stage runner maps them into the stage root. */
const STAGE_DIRS = ['src', 'app', 'out', 'usr/local', 'opt'];

/**
 * A RUN command with its absolute paths under STAGE_DIRS moved into the stage root. Any other
 * absolute path is refused: it would act on this machine, not on the stage.
 */
export function mapRunCommand(command: string, root: string): string {
  const dirs = STAGE_DIRS.map((d) => d.replace('/', '\\/')).join('|');
  const mapped = command.replace(
    new RegExp(`(^|[\\s=])\\/(${dirs})(?=[/\\s]|$)`, 'g'),
    (_m, pre: string, dir: string) => `${pre}${path.join(root, dir)}`,
  );
  for (const m of mapped.matchAll(/(?:^|[\s=])(\/[^\s;&|]*)/g)) {
    const p = m[1] ?? '';
    if (!p.startsWith(`${root}/`) && p !== '/dev/null')
      throw new Error(`RUN names ${p}: the stage runner maps only /${STAGE_DIRS.join(', /')} into a stage`);
  }
  return mapped;
}

/**
 * Runs the Dockerfile's stages on this machine without a container runtime: each stage gets its
 * own directory as its filesystem root, WORKDIR/COPY/ENV/USER/ENTRYPOINT are applied to it, and
 * RUN commands run with sh in the stage's working directory, their absolute paths mapped into the
 * stage root (mapRunCommand). The base image is this machine's Node.js, not the image's; a stage
 * FROM the base image starts with the files baseFiles lists (absolute paths, created empty), a
 * stand-in for the base image's layout.
 */
export async function runDockerfileStages(
  dockerfile: string,
  context: string,
  scratch: string,
  baseFiles: string[] = [],
): Promise<Map<string, StageResult>> {
  const { stages } = parseDockerfile(readFileSync(dockerfile, 'utf8'));
  const results = new Map<string, StageResult>();
  for (const [i, stage] of stages.entries()) {
    const key = stage.name ?? `stage-${i}`;
    const root = path.join(scratch, key);
    mkdirSync(root, { recursive: true });
    for (const f of results.has(stage.from) ? [] : baseFiles) {
      mkdirSync(path.dirname(path.join(root, f)), { recursive: true });
      writeFileSync(path.join(root, f), '');
    }
    const res: StageResult = { root, workdir: '/', env: {}, user: undefined, entrypoint: undefined, log: '' };
    const inRoot = (p: string): string =>
      path.join(root, path.posix.isAbsolute(p) ? p : path.posix.join(res.workdir, p));
    for (const ins of stage.instructions) {
      switch (ins.op) {
        case 'WORKDIR':
          res.workdir = path.posix.resolve(res.workdir, ins.args);
          mkdirSync(inRoot(res.workdir), { recursive: true });
          break;
        case 'ENV': {
          const m = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(ins.args);
          if (m?.[1] !== undefined && m[2] !== undefined) res.env[m[1]] = m[2];
          break;
        }
        case 'USER':
          res.user = ins.args;
          break;
        case 'ENTRYPOINT':
          res.entrypoint = JSON.parse(ins.args) as string[];
          break;
        case 'COPY': {
          const words = ins.args.split(/\s+/);
          const from = words.find((w) => w.startsWith('--from='))?.slice('--from='.length);
          const paths = words.filter((w) => !w.startsWith('--'));
          const dest = paths.pop();
          if (dest === undefined || paths.length === 0) throw new Error(`bad COPY: ${ins.args}`);
          let srcRoot = context;
          if (from !== undefined) {
            const s = results.get(from);
            if (s === undefined) throw new Error(`COPY --from=${from}: no such earlier stage`);
            srcRoot = s.root;
          }
          for (const src of paths) {
            const abs = path.join(srcRoot, src);
            if (!existsSync(abs))
              throw new Error(`COPY source ${src} does not exist (${from ?? 'build context'})`);
            const target = inRoot(dest);
            if (statSync(abs).isDirectory()) {
              // Docker copies a directory's contents, not the directory itself.
              mkdirSync(target, { recursive: true });
              cpSync(abs, target, { recursive: true });
            } else {
              const file = dest.endsWith('/') ? path.join(target, path.basename(src)) : target;
              mkdirSync(path.dirname(file), { recursive: true });
              cpSync(abs, file);
            }
          }
          break;
        }
        case 'RUN': {
          const command = mapRunCommand(ins.args, root);
          const r = await run('sh', ['-ec', command], {
            cwd: inRoot(res.workdir),
            env: { ...process.env, ...res.env, npm_config_prefer_offline: 'true' },
            timeoutMs: 480_000,
          });
          res.log += `$ ${command}\n${r.stdout}${r.stderr}`;
          if (r.code !== 0) throw new Error(`stage ${key}: RUN ${ins.args} failed (${r.code}):\n${r.stderr}`);
          break;
        }
        case 'ARG':
        case 'EXPOSE':
        case 'LABEL':
          break;
        default:
          throw new Error(`the stage runner does not know ${ins.op}`);
      }
    }
    results.set(key, res);
  }
  return results;
}
