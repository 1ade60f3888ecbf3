// Canvas plot of attention ms/token against context length. No dependencies.

/** 1, 2, 5 × 10^k step giving about `count` ticks over [0, max]. */
function niceStep(max, count) {
  const raw = max / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

function fmtTick(v) {
  if (v === 0) return '0';
  if (Math.abs(v) >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
  if (Math.abs(v) >= 1000) return `${+(v / 1000).toFixed(1)}k`;
  if (Math.abs(v) >= 10) return String(Math.round(v));
  return String(+v.toPrecision(2));
}

/**
 * Draws `points` ([contextLength, ms], increasing x) on `canvas`.
 * opts: { xMin, xMax } the x range (the run's prompt length and target context).
 */
export function drawPlot(canvas, points, { xMin = 0, xMax = 1 } = {}) {
  const dpr = window.devicePixelRatio || 1;
  const cssW = canvas.clientWidth || 600;
  const cssH = canvas.clientHeight || 260;
  if (canvas.width !== Math.round(cssW * dpr) || canvas.height !== Math.round(cssH * dpr)) {
    canvas.width = Math.round(cssW * dpr);
    canvas.height = Math.round(cssH * dpr);
  }
  const g = canvas.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, cssW, cssH);

  const css = getComputedStyle(canvas);
  const fg = css.getPropertyValue('--plot-fg').trim() || '#222';
  const grid = css.getPropertyValue('--plot-grid').trim() || '#ddd';
  const dot = css.getPropertyValue('--plot-dot').trim() || 'rgba(40,110,200,0.35)';
  const line = css.getPropertyValue('--plot-line').trim() || '#1d5fb4';

  const L = 56, R = 22, T = 14, B = 38;
  const w = cssW - L - R, h = cssH - T - B;
  if (w <= 10 || h <= 10) return;
  if (!(xMax > xMin)) xMax = xMin + 1;

  // Bins of a few points (at most one per 4 px): their medians make the line (robust to the
  // odd GC or scheduling spike), the raw points the dots.
  const covered = points.length ? Math.max(1e-3, Math.min(1, (points[points.length - 1][0] - xMin) / (xMax - xMin))) : 1;
  const nb = Math.max(1, Math.min(200, Math.floor(w / 4), Math.ceil(points.length / 4 / covered)));
  const bins = Array.from({ length: nb }, () => []);
  for (const [x, y] of points) {
    const b = Math.min(nb - 1, Math.max(0, Math.floor(((x - xMin) / (xMax - xMin)) * nb)));
    bins[b].push(y);
  }
  const mid = bins.map((v) => (v.length ? v.sort((a, b) => a - b)[v.length >> 1] : NaN));
  let yMax = 0;
  for (const m of mid) if (m > yMax) yMax = m;
  // Leave room above the mean line; single spikes are clipped at the top.
  yMax = yMax > 0 ? yMax * 1.35 : 1;
  const yStep = niceStep(yMax, 5);
  yMax = Math.ceil(yMax / yStep) * yStep;
  const xStep = niceStep(xMax - xMin, 6);

  const px = (x) => L + ((x - xMin) / (xMax - xMin)) * w;
  const py = (y) => T + h - (Math.min(y, yMax) / yMax) * h;

  g.font = '11px system-ui, sans-serif';
  g.lineWidth = 1;
  g.strokeStyle = grid;
  g.fillStyle = fg;
  g.textAlign = 'right';
  g.textBaseline = 'middle';
  for (let y = 0; y <= yMax + 1e-9; y += yStep) {
    const yy = Math.round(py(y)) + 0.5;
    g.beginPath();
    g.moveTo(L, yy);
    g.lineTo(L + w, yy);
    g.stroke();
    g.fillText(fmtTick(y), L - 6, yy);
  }
  g.textAlign = 'center';
  g.textBaseline = 'top';
  for (let x = Math.ceil(xMin / xStep) * xStep; x <= xMax + 1e-9; x += xStep) {
    const xx = Math.round(px(x)) + 0.5;
    g.beginPath();
    g.moveTo(xx, T);
    g.lineTo(xx, T + h);
    g.stroke();
    g.fillText(fmtTick(x), xx, T + h + 5);
  }
  g.strokeStyle = fg;
  g.strokeRect(L + 0.5, T + 0.5, w, h);
  g.fillText('context length (tokens)', L + w / 2, T + h + 20);
  g.save();
  g.translate(13, T + h / 2);
  g.rotate(-Math.PI / 2);
  g.textBaseline = 'middle';
  g.fillText('attention ms / token (all layers)', 0, 0);
  g.restore();

  if (!points.length) {
    g.fillStyle = grid;
    g.textBaseline = 'middle';
    g.fillText('no data yet: press Start', L + w / 2, T + h / 2);
    return;
  }
  // raw points (skipped when there are far more than pixels: the line says it all)
  if (points.length <= 20000) {
    g.fillStyle = dot;
    for (const [x, y] of points) g.fillRect(px(x) - 1, py(y) - 1, 2, 2);
  }
  g.strokeStyle = line;
  g.lineWidth = 2;
  g.beginPath();
  let started = false;
  for (let b = 0; b < nb; b++) {
    if (!bins[b].length) continue;
    const x = L + ((b + 0.5) / nb) * w, y = py(mid[b]);
    if (started) g.lineTo(x, y);
    else g.moveTo(x, y), (started = true);
  }
  g.stroke();
}
