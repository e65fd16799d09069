// SPDX-License-Identifier: MIT
// The headless Chromium the browser tests drive (ui-e2e.mjs, preview-e2e.mjs,
// browser-app.mjs): $CHROMIUM or Debian's /usr/bin/chromium.
import { chromium } from 'playwright-core';

export function launchChromium() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--no-first-run', '--disable-sync'],
  });
}
