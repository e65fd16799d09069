// SPDX-License-Identifier: MIT
// Headless Chromium (Debian's /usr/bin/chromium) driven by playwright-core:
// open the page at <pageUrl> (served from another origin than routerd), wait
// for the page script to finish, print its result as one JSON line.
// usage: node browser.js <pageUrl> [timeoutMs]
'use strict';
const { chromium } = require('playwright-core');

const [pageUrl, timeoutArg] = process.argv.slice(2);
const timeout = Number(timeoutArg || 60000);

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu', '--headless',
           '--disable-background-networking', '--disable-component-update', '--no-first-run',
           '--disable-sync'],
  });
  try {
    const page = await browser.newPage();
    const logs = [];
    page.on('console', m => logs.push(`${m.type()}: ${m.text()}`));
    page.on('pageerror', e => logs.push(`pageerror: ${e.message}`));
    await page.goto(pageUrl);
    await page.waitForFunction(() => window.__result !== undefined, null, { timeout });
    const result = await page.evaluate(() => window.__result);
    result.logs = logs;
    console.log(JSON.stringify(result));
  } finally {
    await browser.close();
  }
})().catch(e => { console.error(e.stack || String(e)); process.exit(1); });
