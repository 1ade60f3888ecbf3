#!/usr/bin/env node
// Small static server for the demo page (web/) and the package files (js/, dist/).
//
//   node scripts/serve.mjs [--port N] [--host H] [--no-isolation] [--pkg-dir DIR]
//
// By default every response carries Cross-Origin-Opener-Policy: same-origin and
// Cross-Origin-Embedder-Policy: require-corp, so the page is cross-origin isolated
// (SharedArrayBuffer available → the SIMD + pthreads build). --no-isolation drops
// them, which makes the package fall back to the single-thread build.
//
// URL layout (what the page's import map relies on):
//   /            → web/            (index.html: the chat; bench.html: decode steps of model shapes)
//   /js/...      → <pkg-dir>/js/   (the package entry: /js/index.js)
//   /dist/...    → <pkg-dir>/dist/ (glue, .wasm, pthread worker)
//   /models/...  → <pkg-dir>/models/ (the model the package ships: the chat page's)
//   /vendor/jinja/ → node_modules/@huggingface/jinja/dist/ (the chat page renders GGUF chat templates with it)
// <pkg-dir> is the repository root by default; point it at an installed
// node_modules/sdpa-wasm to try the page against a packed tarball.
// --cors serves like a CDN: Access-Control-Allow-Origin: * and
// Cross-Origin-Resource-Policy: cross-origin (pages on other origins, isolated
// or not, may fetch and import the files).

import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export const MIME = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.cjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.wasm': 'application/wasm',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.txt': 'text/plain; charset=utf-8',
  '.md': 'text/plain; charset=utf-8',
  '.ts': 'text/plain; charset=utf-8',
};

/** Maps a URL path to a file below one of the mounted roots, or null (never escapes a root). */
function resolveFile(mounts, urlPath) {
  let rel;
  try {
    rel = decodeURIComponent(urlPath);
  } catch {
    return null;
  }
  if (rel.includes('\0')) return null;
  for (const [prefix, dir] of mounts) {
    if (rel === prefix.slice(0, -1) || rel.startsWith(prefix)) {
      const sub = rel.slice(prefix.length);
      const file = path.resolve(dir, '.' + path.posix.normalize('/' + sub));
      if (file !== dir && !file.startsWith(dir + path.sep)) return null;
      return file;
    }
  }
  return null;
}

/**
 * Starts the server. Resolves to the http.Server once it listens; `server.url`
 * is the page URL. Options:
 *   port       0 = any free port; default 8080 (tries the next ones when busy unless strictPort)
 *   host       default 127.0.0.1
 *   isolation  default true: send COOP same-origin + COEP require-corp
 *   webDir     default <repo>/web
 *   pkgDir     default <repo> (serves its js/ and dist/)
 *   cors       default false: send Access-Control-Allow-Origin: * and CORP cross-origin (a CDN)
 *   headers    more response headers (e.g. a Content-Security-Policy)
 *   mounts     more [urlPrefix, dir] pairs, tried before the others
 *   log        function for one line per request (default none)
 */
export async function serve({
  port = 8080,
  host = '127.0.0.1',
  isolation = true,
  webDir = path.join(REPO, 'web'),
  pkgDir = REPO,
  strictPort = false,
  cors = false,
  headers = {},
  mounts: extraMounts = [],
  log = null,
} = {}) {
  const mounts = [
    ...extraMounts.map(([prefix, dir]) => [prefix.endsWith('/') ? prefix : `${prefix}/`, path.resolve(dir)]),
    ['/js/', path.resolve(pkgDir, 'js')],
    ['/dist/', path.resolve(pkgDir, 'dist')],
    ['/models/', path.resolve(pkgDir, 'models')],
    // the chat page's renderer of GGUF chat templates (a module Worker has no import map: it imports it by URL)
    ['/vendor/jinja/', path.join(REPO, 'node_modules/@huggingface/jinja/dist')],
    ['/', path.resolve(webDir)],
  ];
  const baseHeaders = { 'Cache-Control': 'no-store', 'X-Content-Type-Options': 'nosniff' };
  if (isolation) {
    baseHeaders['Cross-Origin-Opener-Policy'] = 'same-origin';
    baseHeaders['Cross-Origin-Embedder-Policy'] = 'require-corp';
    baseHeaders['Cross-Origin-Resource-Policy'] = 'same-origin';
  }
  if (cors) {
    baseHeaders['Access-Control-Allow-Origin'] = '*';
    baseHeaders['Cross-Origin-Resource-Policy'] = 'cross-origin';
  }
  Object.assign(baseHeaders, headers);

  const server = http.createServer((req, res) => {
    const send = (status, body, type = 'text/plain; charset=utf-8') => {
      res.writeHead(status, { ...baseHeaders, 'Content-Type': type, 'Content-Length': Buffer.byteLength(body) });
      res.end(req.method === 'HEAD' ? undefined : body);
      if (log) log(`${status} ${req.method} ${req.url}`);
    };
    if (cors && req.method === 'OPTIONS') {
      res.writeHead(204, { ...baseHeaders, 'Access-Control-Allow-Methods': 'GET, HEAD', 'Access-Control-Allow-Headers': '*' });
      return res.end();
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') return send(405, 'method not allowed\n');
    let urlPath;
    try {
      urlPath = new URL(req.url, 'http://localhost').pathname;
    } catch {
      return send(400, 'bad request\n');
    }
    let file = resolveFile(mounts, urlPath);
    if (!file) return send(404, 'not found\n');
    fs.stat(file, (err, st) => {
      if (!err && st.isDirectory()) {
        if (!urlPath.endsWith('/')) {
          res.writeHead(301, { ...baseHeaders, Location: urlPath + '/' });
          res.end();
          return;
        }
        file = path.join(file, 'index.html');
      }
      fs.readFile(file, (err2, data) => {
        if (err2) return send(404, 'not found\n');
        res.writeHead(200, {
          ...baseHeaders,
          'Content-Type': MIME[path.extname(file).toLowerCase()] || 'application/octet-stream',
          'Content-Length': data.length,
        });
        res.end(req.method === 'HEAD' ? undefined : data);
        if (log) log(`200 ${req.method} ${req.url}`);
      });
    });
  });

  const listen = (p) =>
    new Promise((resolve, reject) => {
      const onError = (e) => {
        server.off('listening', onListening);
        reject(e);
      };
      const onListening = () => {
        server.off('error', onError);
        resolve();
      };
      server.once('error', onError);
      server.once('listening', onListening);
      server.listen(p, host);
    });

  let p = port;
  for (let attempt = 0; ; attempt++) {
    try {
      await listen(p);
      break;
    } catch (e) {
      if (e.code === 'EADDRINUSE' && !strictPort && port !== 0 && attempt < 20) {
        p += 1;
        continue;
      }
      throw e;
    }
  }
  const addr = server.address();
  server.url = `http://${host}:${addr.port}/`;
  server.isolation = isolation;
  return server;
}

function parseArgs(argv) {
  const opts = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--no-isolation') opts.isolation = false;
    else if (a === '--port') opts.port = Number(val());
    else if (a.startsWith('--port=')) opts.port = Number(a.slice(7));
    else if (a === '--host') opts.host = val();
    else if (a === '--pkg-dir') opts.pkgDir = path.resolve(val());
    else if (a === '--strict-port') opts.strictPort = true;
    else if (a === '--cors') opts.cors = true;
    else if (a === '--verbose') opts.log = (l) => console.log(l);
    else if (a === '-h' || a === '--help') {
      console.log('usage: node scripts/serve.mjs [--port N] [--host H] [--no-isolation] [--pkg-dir DIR] [--strict-port] [--cors] [--verbose]');
      process.exit(0);
    } else throw new Error(`unknown argument: ${a}`);
  }
  if (opts.port !== undefined && !(Number.isInteger(opts.port) && opts.port >= 0 && opts.port < 65536)) {
    throw new Error(`--port: expected an integer 0..65535`);
  }
  if (opts.port === undefined && process.env.PORT) opts.port = Number(process.env.PORT);
  return opts;
}

/** CLI entry, shared with scripts/start.mjs. */
export async function main(argv = process.argv.slice(2)) {
  let opts;
  try {
    opts = parseArgs(argv);
  } catch (e) {
    console.error(`serve: ${e.message}`);
    process.exit(2);
  }
  const server = await serve(opts);
  const mode = server.isolation
    ? 'cross-origin isolated (COOP/COEP on): SIMD + threads build'
    : 'NOT cross-origin isolated (--no-isolation): single-thread build';
  console.log(`sdpa-wasm demo: ${server.url}  [${mode}]  (Ctrl+C to stop)`);
  const stop = () => {
    server.close();
    server.closeAllConnections?.();
    process.exit(0);
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  return server;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((e) => {
    console.error(`serve: ${e.message}`);
    process.exit(1);
  });
}
