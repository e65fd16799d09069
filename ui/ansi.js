// SPDX-License-Identifier: MIT
// ANSI SGR escape codes → styled spans (DOM, never HTML strings). Other
// control sequences (cursor movement, OSC titles) are dropped.

const CSI = /\x1b\[([0-9;?]*)([@-~])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]/g;

export function initialState() {
  return { fg: null, bg: null, bold: false, dim: false, italic: false, underline: false, inverse: false };
}

function color256(n) {
  if (n < 16) return { cls: n };
  if (n < 232) {
    n -= 16;
    const v = (x) => (x ? 55 + x * 40 : 0);
    return { rgb: `rgb(${v(Math.floor(n / 36))},${v(Math.floor(n / 6) % 6)},${v(n % 6)})` };
  }
  const g = 8 + (n - 232) * 10;
  return { rgb: `rgb(${g},${g},${g})` };
}

function applySgr(st, params) {
  const p = params === '' ? [0] : params.split(';').map((x) => (x === '' ? 0 : Number(x)));
  for (let i = 0; i < p.length; i++) {
    const c = p[i];
    if (c === 0) Object.assign(st, initialState());
    else if (c === 1) st.bold = true;
    else if (c === 2) st.dim = true;
    else if (c === 3) st.italic = true;
    else if (c === 4) st.underline = true;
    else if (c === 7) st.inverse = true;
    else if (c === 22) st.bold = st.dim = false;
    else if (c === 23) st.italic = false;
    else if (c === 24) st.underline = false;
    else if (c === 27) st.inverse = false;
    else if (c >= 30 && c <= 37) st.fg = { cls: c - 30 };
    else if (c >= 90 && c <= 97) st.fg = { cls: c - 90 + 8 };
    else if (c === 39) st.fg = null;
    else if (c >= 40 && c <= 47) st.bg = { cls: c - 40 };
    else if (c >= 100 && c <= 107) st.bg = { cls: c - 100 + 8 };
    else if (c === 49) st.bg = null;
    else if ((c === 38 || c === 48) && p[i + 1] === 5) {
      st[c === 38 ? 'fg' : 'bg'] = color256(p[i + 2] | 0);
      i += 2;
    } else if ((c === 38 || c === 48) && p[i + 1] === 2) {
      st[c === 38 ? 'fg' : 'bg'] = { rgb: `rgb(${p[i + 2] | 0},${p[i + 3] | 0},${p[i + 4] | 0})` };
      i += 4;
    }
  }
}

// Parse one line of text (no '\n') starting in state st (modified in place).
// Returns spans [{t, s}] where s is a frozen copy of the state or null.
export function parseLine(text, st) {
  const cr = text.lastIndexOf('\r', text.length - 2);
  if (cr >= 0) text = text.slice(cr + 1); // a progress line: what was drawn last
  text = text.replace(/\r$/, '');
  const spans = [];
  let last = 0;
  const plain = (s) => !s.fg && !s.bg && !s.bold && !s.dim && !s.italic && !s.underline && !s.inverse;
  const push = (t) => {
    if (t) spans.push({ t: t.replace(/[\x00-\x08\x0b-\x1f\x7f]/g, ''), s: plain(st) ? null : { ...st } });
  };
  CSI.lastIndex = 0;
  let m;
  while ((m = CSI.exec(text))) {
    push(text.slice(last, m.index));
    if (m[2] === 'm' && m[1] !== undefined) applySgr(st, m[1]);
    last = CSI.lastIndex;
  }
  push(text.slice(last));
  return spans;
}

export function renderSpans(spans, into) {
  for (const { t, s } of spans) {
    if (!s) {
      into.append(t);
      continue;
    }
    const el = document.createElement('span');
    el.textContent = t;
    let fg = s.fg, bg = s.bg;
    if (s.inverse) [fg, bg] = [bg || { cls: 'dfg' }, fg || { cls: 'dbg' }];
    if (fg) { if (fg.rgb) el.style.color = fg.rgb; else el.classList.add(`f${fg.cls}`); }
    if (bg) { if (bg.rgb) el.style.backgroundColor = bg.rgb; else el.classList.add(`b${bg.cls}`); }
    if (s.bold) el.classList.add('bold');
    if (s.dim) el.classList.add('dim');
    if (s.italic) el.classList.add('italic');
    if (s.underline) el.classList.add('uline');
    into.append(el);
  }
}
