// The browser engines the browser and bundler suites run in, and how each is launched
// through puppeteer-core: Chromium over the DevTools protocol, Firefox ESR over WebDriver
// BiDi (puppeteer-core drives Debian's firefox-esr as it is; nothing is downloaded).
//
//   --browser chromium|firefox   (default chromium; env SDPA_BROWSER)
// Env: CHROMIUM_PATH (default /usr/bin/chromium), FIREFOX_PATH (default /usr/bin/firefox-esr).

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

// The builds feature detection must pick, isolated and not, in an engine that validates relaxed SIMD
// (both do today; an engine without it would name { isolated: 'simd-threads', plain: 'simd' }).
const RELAXED_BUILDS = Object.freeze({ isolated: 'relaxed-threads', plain: 'relaxed' });

export const ENGINES = {
  chromium: {
    label: 'Chromium',
    path: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
    apt: 'chromium',
    builds: RELAXED_BUILDS,
    options: () => ({
      browser: 'chrome',
      args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-quic'],
    }),
  },
  firefox: {
    label: 'Firefox',
    path: process.env.FIREFOX_PATH || '/usr/bin/firefox-esr',
    apt: 'firefox-esr',
    builds: RELAXED_BUILDS,
    // Quiet start-up: no first-run pages, no update or telemetry traffic to a network CI does not have.
    options: () => ({
      browser: 'firefox',
      extraPrefsFirefox: {
        'browser.shell.checkDefaultBrowser': false,
        'app.update.enabled': false,
        'datareporting.policy.dataSubmissionEnabled': false,
        'toolkit.telemetry.enabled': false,
        'browser.startup.homepage_override.mstone': 'ignore',
      },
    }),
  },
};

/** The engine named by `--browser NAME` in `args` (or SDPA_BROWSER), checked. */
export function engineName(args) {
  const i = args.indexOf('--browser');
  const name = (i >= 0 ? args[i + 1] : process.env.SDPA_BROWSER) || 'chromium';
  if (!ENGINES[name]) throw new Error(`--browser ${name}: expected one of ${Object.keys(ENGINES).join(', ')}`);
  return name;
}

/** Launches `name` headless with its own profile directory; returns { browser, profile } (remove `profile` when done). */
export async function launchEngine(puppeteer, name, { protocolTimeout = 60_000 } = {}) {
  const e = ENGINES[name];
  if (!fs.existsSync(e.path)) throw new Error(`no ${e.label} at ${e.path} (apt-get install -y ${e.apt}, or set ${name.toUpperCase()}_PATH)`);
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), `sdpa-${name}-`));
  const browser = await puppeteer.launch({
    executablePath: e.path, headless: true, userDataDir: profile, protocolTimeout, timeout: 60_000, ...e.options(),
  });
  return { browser, profile };
}
