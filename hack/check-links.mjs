// @ts-check
// Checks the relative links of README.md, CHANGELOG.md, docs/**/*.md and the charts' READMEs: a linked file must exist (relative to
// the linking file; a leading / is the repository root), and a #fragment must name a heading or an
// HTML anchor of the target Markdown file, as GitHub computes heading anchors: lowercase,
// punctuation other than - and _ dropped, each space a -, a repeated heading suffixed -1, -2 …
// Links with a scheme (https:, mailto:) are not followed. Prints each broken link as file:line and
// exits 1 when there is one. Usage: node hack/check-links.mjs [file.md ...]

import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import process from 'node:process';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/**
 * @returns {string[]} README.md, CHANGELOG.md, every .md file under docs/ and each chart's README,
 * relative to the root, sorted.
 */
function defaultFiles() {
  /** @type {string[]} */
  const files = ['README.md', 'CHANGELOG.md'].filter((f) => existsSync(path.join(root, f)));
  if (existsSync(path.join(root, 'charts'))) {
    for (const c of readdirSync(path.join(root, 'charts'))) {
      if (existsSync(path.join(root, 'charts', c, 'README.md'))) files.push(`charts/${c}/README.md`);
    }
  }
  /** @param {string} dir */
  const walk = (dir) => {
    if (!existsSync(path.join(root, dir))) return;
    for (const e of readdirSync(path.join(root, dir), { withFileTypes: true })) {
      const rel = `${dir}/${e.name}`;
      if (e.isDirectory()) walk(rel);
      else if (e.name.endsWith('.md')) files.push(rel);
    }
  };
  walk('docs');
  return files.sort();
}

/**
 * The lines of a Markdown file with fenced code blocks and HTML comments blanked (their content is
 * neither a heading nor a link), keeping line numbers.
 * @param {string} text
 * @returns {string[]}
 */
function proseLines(text) {
  const lines = text.split('\n');
  /** @type {string | undefined} */
  let fence;
  let inComment = false;
  return lines.map((line) => {
    if (fence !== undefined) {
      const close = /^ {0,3}(`{3,}|~{3,})\s*$/.exec(line);
      if (
        close?.[1] !== undefined &&
        close[1].startsWith(fence.charAt(0)) &&
        close[1].length >= fence.length
      ) {
        fence = undefined;
      }
      return '';
    }
    const open = /^ {0,3}(`{3,}|~{3,})/.exec(line);
    if (open?.[1] !== undefined) {
      fence = open[1];
      return '';
    }
    let out = '';
    let rest = line;
    for (;;) {
      if (inComment) {
        const end = rest.indexOf('-->');
        if (end < 0) return out;
        rest = rest.slice(end + 3);
        inComment = false;
      }
      const start = rest.indexOf('<!--');
      if (start < 0) return out + rest;
      out += rest.slice(0, start);
      rest = rest.slice(start + 4);
      inComment = true;
    }
  });
}

/**
 * A line without its code spans (or with their content, for heading text).
 * @param {string} line
 * @param {boolean} keepContent
 */
function withoutCodeSpans(line, keepContent) {
  return line.replace(
    /(`+)([\s\S]*?[^`])\1(?!`)/g,
    (_m, /** @type {string} */ _ticks, /** @type {string} */ body) => (keepContent ? body.trim() : ' '),
  );
}

/**
 * GitHub's anchor of a heading: its text as rendered (markup dropped), lowercased, characters other
 * than letters, digits, marks, connector punctuation (_), spaces and - dropped, spaces turned to -.
 * @param {string} heading the heading's Markdown source, without the leading #s
 */
function slugOf(heading) {
  const text = withoutCodeSpans(heading, true)
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/!?\[([^\]]*)\]\[[^\]]*\]/g, '$1')
    .replace(/<[^>]+>/g, '')
    // Emphasis with underscores (_x_, __x__); an underscore inside a word stays.
    .replace(/(^|[^\p{L}\p{N}_])_+(?=\S)/gu, '$1')
    .replace(/(?<=\S)_+(?=$|[^\p{L}\p{N}_])/gu, '')
    .trim();
  return text
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

/** @type {Map<string, Set<string>>} */
const anchorCache = new Map();

/**
 * The anchors of a Markdown file: its headings' (numbered as GitHub numbers repeats) and the ids
 * and names of its HTML elements.
 * @param {string} file absolute path
 * @returns {Set<string>}
 */
function anchorsOf(file) {
  const cached = anchorCache.get(file);
  if (cached !== undefined) return cached;
  /** @type {Set<string>} */
  const anchors = new Set();
  /** @type {Map<string, number>} */
  const seen = new Map();
  /** @param {string} heading */
  const add = (heading) => {
    const base = slugOf(heading);
    let slug = base;
    let n = seen.get(base);
    if (n !== undefined) {
      // github-slugger: the next free "base-n".
      do {
        n++;
        slug = `${base}-${n}`;
      } while (seen.has(slug));
      seen.set(base, n);
    }
    seen.set(slug, seen.get(slug) ?? 0);
    anchors.add(slug);
  };
  const lines = proseLines(readFileSync(file, 'utf8'));
  lines.forEach((line, i) => {
    const atx = /^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/.exec(line);
    if (atx !== null) add(atx[1] ?? '');
    else if (/^ {0,3}(=+|-+)\s*$/.test(line) && i > 0) {
      const prev = lines[i - 1] ?? '';
      const isText = prev.trim() !== '' && !/^\s*([-*+]|\d+[.)]|>|\|)/.test(prev) && !prev.includes('|');
      if (isText && !/^ {0,3}#/.test(prev)) add(prev.trim());
    }
    for (const m of line.matchAll(/<[a-zA-Z][^>]*\s(?:id|name)\s*=\s*["']([^"']+)["']/g)) {
      if (m[1] !== undefined) anchors.add(m[1]);
    }
  });
  anchorCache.set(file, anchors);
  return anchors;
}

/**
 * The link destinations of a line: inline links and images, reference definitions, HTML href/src.
 * @param {string} line
 * @returns {string[]}
 */
function linksOf(line) {
  const text = withoutCodeSpans(line, false);
  /** @type {string[]} */
  const out = [];
  const inline = /!?\[(?:[^\]\\]|\\.)*\]\(\s*(<[^>]*>|[^\s)]*)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)/g;
  for (const m of text.matchAll(inline)) out.push(m[1] ?? '');
  const definition = /^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)/.exec(text);
  if (definition?.[1] !== undefined) out.push(definition[1]);
  for (const m of text.matchAll(/<(?:a|img)\s[^>]*?(?:href|src)\s*=\s*["']([^"']*)["']/gi))
    out.push(m[1] ?? '');
  return out.map((d) => d.replace(/^<(.*)>$/, '$1'));
}

/**
 * Why a link from `from` is broken, or undefined when it is fine (or not a relative link).
 * @param {string} from absolute path of the linking file
 * @param {string} dest
 * @returns {string | undefined}
 */
function problem(from, dest) {
  if (dest === '') return 'empty link';
  if (/^[a-z][a-z0-9+.-]*:/i.test(dest) || dest.startsWith('//')) return undefined;
  const hash = dest.indexOf('#');
  const rawPath = (hash < 0 ? dest : dest.slice(0, hash)).replace(/\?.*$/, '');
  const fragment = hash < 0 ? undefined : dest.slice(hash + 1);
  let target = from;
  if (rawPath !== '') {
    let decoded;
    try {
      decoded = decodeURIComponent(rawPath);
    } catch {
      return 'malformed percent-encoding';
    }
    target = decoded.startsWith('/') ? path.join(root, decoded) : path.resolve(path.dirname(from), decoded);
    if (!existsSync(target)) return `${path.relative(root, target) || '.'} does not exist`;
  }
  if (fragment === undefined || fragment === '') return undefined;
  if (!target.endsWith('.md') || statSync(target).isDirectory()) return undefined;
  let anchor;
  try {
    anchor = decodeURIComponent(fragment);
  } catch {
    return 'malformed percent-encoding';
  }
  if (anchorsOf(target).has(anchor)) return undefined;
  return `no heading or anchor "${anchor}" in ${path.relative(root, target)}`;
}

const args = process.argv.slice(2);
const files = args.length > 0 ? args.map((f) => path.relative(root, path.resolve(f))) : defaultFiles();
let broken = 0;
let checked = 0;
for (const rel of files) {
  const file = path.join(root, rel);
  proseLines(readFileSync(file, 'utf8')).forEach((line, i) => {
    for (const dest of linksOf(line)) {
      checked++;
      const why = problem(file, dest);
      if (why === undefined) continue;
      broken++;
      process.stdout.write(`${rel}:${i + 1}: broken link (${dest}): ${why}\n`);
    }
  });
}
if (broken > 0) {
  process.stdout.write(`${broken} broken link(s) in ${files.length} file(s)\n`);
  process.exitCode = 1;
} else {
  process.stdout.write(`links: ${checked} in ${files.length} file(s), none broken\n`);
}
