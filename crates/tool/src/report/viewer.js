// The sequence diagram: one column per service, a row per message, drawn
// on a canvas for the visible rows only, so a million messages scroll as
// smoothly as ten. Calls and signals are arrows; each answer is joined to
// its call by an arc labelled with the time it took.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("data").textContent);
  const n = D.dt.length;
  const ROW = 18, GUTTER = 90, COL = 190;
  const CALL = 1, RETURN = 2, ERROR = 3, SIGNAL = 4;
  // Absolute times (µs since the first message) from the deltas.
  const time = new Float64Array(n);
  for (let i = 0, t = 0; i < n; i++) { t += D.dt[i]; time[i] = t; }
  const kind = Uint8Array.from(D.kind);
  const from = Int32Array.from(D.from);
  const to = Int32Array.from(D.to);
  const label = Int32Array.from(D.label);
  const partner = Int32Array.from(D.partner);
  const cols = D.cols, strings = D.strings;

  const seq = document.getElementById("seq");
  const canvas = document.getElementById("canvas");
  const spacer = document.getElementById("spacer");
  const heads = document.getElementById("heads");
  const service = document.getElementById("service");
  const member = document.getElementById("member");
  const shown = document.getElementById("shown");
  const ctx = canvas.getContext("2d");

  const gutter = document.createElement("div");
  gutter.className = "gutter";
  gutter.style.width = GUTTER + "px";
  gutter.textContent = "ms";
  heads.appendChild(gutter);
  cols.forEach((name, c) => {
    const h = document.createElement("div");
    h.className = "svc";
    h.style.width = COL + "px";
    h.title = name;
    h.textContent = name;
    heads.appendChild(h);
    const o = document.createElement("option");
    o.value = c;
    o.textContent = name;
    service.appendChild(o);
  });

  // The rows shown (message indices) and where each message sits (-1:
  // filtered out).
  let rows = new Int32Array(0);
  const pos = new Int32Array(n);

  function applyFilter() {
    const svc = Number(service.value);
    const text = member.value.trim();
    const labelMatches = new Uint8Array(strings.length);
    strings.forEach((s, i) => { labelMatches[i] = text === "" || s.includes(text) ? 1 : 0; });
    const keep = new Int32Array(n);
    let count = 0;
    for (let i = 0; i < n; i++) {
      let ok = svc < 0 || from[i] === svc || to[i] === svc;
      if (ok && !labelMatches[label[i]]) {
        // An answer shows with its call's member.
        const call = partner[i];
        ok = (kind[i] === RETURN || kind[i] === ERROR) && call >= 0 && labelMatches[label[call]] === 1;
      }
      pos[i] = ok ? count : -1;
      if (ok) keep[count++] = i;
    }
    rows = keep.slice(0, count);
    shown.textContent = count + " of " + n + " messages";
    layout();
  }

  function layout() {
    const width = Math.max(seq.clientWidth, GUTTER + cols.length * COL + 40);
    canvas.width = seq.clientWidth;
    canvas.height = seq.clientHeight;
    spacer.style.width = width + "px";
    spacer.style.height = Math.max(0, rows.length * ROW + ROW - canvas.height) + "px";
    draw();
  }

  const x = (c) => GUTTER + c * COL + COL / 2;
  const colour = { 1: "#1d4ed8", 2: "#15803d", 3: "#b91c1c", 4: "#7c3aed" };

  function arrow(x1, x2, y, dashed) {
    ctx.setLineDash(dashed ? [4, 3] : []);
    ctx.beginPath(); ctx.moveTo(x1, y); ctx.lineTo(x2, y); ctx.stroke();
    ctx.setLineDash([]);
    const d = x2 >= x1 ? -6 : 6;
    ctx.beginPath(); ctx.moveTo(x2, y); ctx.lineTo(x2 + d, y - 4); ctx.lineTo(x2 + d, y + 4); ctx.fill();
  }

  function ms(us) { return (us / 1000).toFixed(3); }

  // An arc beside the callee's column from the call's row to its answer's.
  function arc(call, answer, top, left) {
    const yc = pos[call] * ROW + ROW / 2 - top;
    const ya = pos[answer] * ROW + ROW / 2 - top;
    const xc = x(to[call] >= 0 ? to[call] : from[answer]) - left + 10;
    const bulge = Math.min(60, 10 + (ya - yc) / 8);
    ctx.strokeStyle = "#f59e0b"; ctx.fillStyle = "#b45309";
    ctx.beginPath(); ctx.moveTo(xc, yc);
    ctx.bezierCurveTo(xc + bulge, yc, xc + bulge, ya, xc, ya); ctx.stroke();
    const mid = Math.max(10, Math.min(canvas.height - 4, (yc + ya) / 2));
    ctx.fillText(ms(time[answer] - time[call]) + " ms", xc + bulge / 2 + 4, mid);
  }

  let arcsDrawn = 0;
  function draw() {
    const top = seq.scrollTop, left = seq.scrollLeft;
    heads.scrollLeft = left;
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    // Lifelines.
    ctx.strokeStyle = "#ddd";
    for (let c = 0; c < cols.length; c++) {
      ctx.beginPath(); ctx.moveTo(x(c) - left, 0); ctx.lineTo(x(c) - left, canvas.height); ctx.stroke();
    }
    const first = Math.max(0, Math.floor(top / ROW));
    const last = Math.min(rows.length, Math.ceil((top + canvas.height) / ROW));
    arcsDrawn = 0;
    for (let r = first; r < last; r++) {
      const i = rows[r];
      const y = r * ROW + ROW / 2 - top;
      const k = kind[i];
      ctx.fillStyle = "#666";
      ctx.fillText(ms(time[i]), 4, y);
      ctx.strokeStyle = ctx.fillStyle = colour[k];
      const x1 = x(from[i]) - left;
      const text = (k === RETURN ? "\u21a9 " : "") + strings[label[i]];
      if (to[i] < 0) {
        // A broadcast: from the sender out to every column.
        ctx.beginPath(); ctx.arc(x1, y, 3, 0, 2 * Math.PI); ctx.fill();
        arrow(x1, GUTTER - left + 4, y, false);
        arrow(x1, GUTTER + cols.length * COL - left - 4, y, false);
      } else {
        const x2 = x(to[i]) - left;
        arrow(x1, x2 === x1 ? x1 + 30 : x2, y, k === RETURN || k === ERROR);
      }
      ctx.fillStyle = "#111";
      ctx.fillText(text, Math.min(x1, to[i] < 0 ? x1 : x(to[i]) - left) + 8, y - 5);
      // Arcs: drawn from the answer, or from the call when its answer is
      // below the window.
      const p = partner[i];
      if (p >= 0 && pos[p] >= 0) {
        if (k === RETURN || k === ERROR) { arc(p, i, top, left); arcsDrawn++; }
        else if (k === CALL && pos[p] >= last) { arc(i, p, top, left); arcsDrawn++; }
      }
    }
    canvas.dataset.rowsDrawn = String(last - first);
    canvas.dataset.arcsDrawn = String(arcsDrawn);
  }

  let pending = false;
  seq.addEventListener("scroll", () => {
    if (!pending) { pending = true; requestAnimationFrame(() => { pending = false; draw(); }); }
  });
  window.addEventListener("resize", layout);
  service.addEventListener("change", applyFilter);
  member.addEventListener("input", applyFilter);
  // Filters may come from the address: report.html#service=NAME&member=TEXT
  const params = new URLSearchParams(location.hash.slice(1));
  if (params.has("member")) member.value = params.get("member");
  if (params.has("service")) {
    const c = cols.findIndex((name) => name.includes(params.get("service")));
    if (c >= 0) service.value = String(c);
  }
  applyFilter();
  // ...and #row=N scrolls to the Nth row shown.
  if (params.has("row")) {
    seq.scrollTop = Number(params.get("row")) * ROW;
    draw();
  }
  document.body.dataset.ready = "yes";
})();
