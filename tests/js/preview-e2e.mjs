// SPDX-License-Identifier: MIT
// t_sandbox_ports.py: headless Chromium opens a live preview's URL
// (RW_PREVIEW_URL, http://<token>.preview.localhost:<port>/…: Chromium
// resolves *.localhost to loopback itself) and prints the page's text and
// origin as one JSON line.
import { launchChromium } from './chromium.mjs';

const url = process.env.RW_PREVIEW_URL;
const browser = await launchChromium();
try {
  const page = await browser.newPage();
  const res = await page.goto(url, { waitUntil: 'load', timeout: 30000 });
  const text = await page.textContent('#t');
  const origin = await page.evaluate(() => window.location.origin);
  console.log(JSON.stringify({ status: res.status(), text, origin }));
} finally {
  await browser.close();
}
