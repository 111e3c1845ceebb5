// The floating-point consistency attack (Mironov, CCS 2012) on the browser page's numeric
// releases: for each release y of an answer x, can the page's sampler produce y from a
// neighbouring answer x'? A release it cannot produce from x' rules x' out with certainty.
//
// "before": the page's samplers at f7fad90, kept here (and only here) as the reference:
//   laplace       x + (-scale * sign(u) * log1p(-2|u|)), u = k / 2^53 - 0.5;
//   exp-gaussian  x + sqrt(v) * BoxMuller, v = -log(1 - uniform) / rate.
// "after": perturbWorker from src/privtd/service/static/perturb.js (exact.js).
//
// Run: node benchmarks/attacks/float_page.mjs [releases]   (prints one JSON object)

import { perturbWorker } from "../../src/privtd/service/static/perturb.js";

const TWO53 = 9007199254740992;

// f7fad90's page uniform: 53 random bits from crypto.getRandomValues, in [0, 1).
function oldUniform() {
  const words = new Uint32Array(2);
  crypto.getRandomValues(words);
  return ((words[0] >>> 5) * 67108864 + (words[1] >>> 6)) / TWO53;
}

// f7fad90's Laplace noise as a function of the uniform's integer k (uniform = k / 2^53).
export function oldLaplaceNoise(k, scale) {
  const u = k / TWO53 - 0.5;
  return -scale * Math.sign(u) * Math.log1p(-2 * Math.abs(u));
}

export function oldLaplaceRelease(x, scale) {
  return x + oldLaplaceNoise(oldUniform() * TWO53, scale);
}

export function oldExpGaussianRelease(x, rate) {
  const variance = -Math.log(1 - oldUniform()) / rate;
  const normal = Math.sqrt(-2 * Math.log(1 - oldUniform())) * Math.cos(2 * Math.PI * oldUniform());
  return x + Math.sqrt(variance) * normal;
}

// Can the old Laplace sampler release y from answer x2? The noise is non-decreasing in k, so
// the k with x2 + noise(k) == y form a run: find its start by bisection, then look at a window
// around it (so that a non-monotone last bit of log1p could not hide a preimage).
export function reachableOldLaplace(y, x2, scale, window = 8) {
  let lo = 0;
  let hi = TWO53; // smallest k with x2 + noise(k) >= y lies in [lo, hi]
  while (lo < hi) {
    const mid = lo + Math.floor((hi - lo) / 2); // lo + hi may exceed 2^53
    if (x2 + oldLaplaceNoise(mid, scale) >= y) hi = mid;
    else lo = mid + 1;
  }
  for (let k = Math.max(0, lo - window); k <= Math.min(TWO53 - 1, lo + window); k++) {
    if (x2 + oldLaplaceNoise(k, scale) === y) return true;
  }
  return false;
}

function nextAfter(x, up) {
  const view = new DataView(new ArrayBuffer(8));
  if (x === 0) return up ? Number.MIN_VALUE : -Number.MIN_VALUE;
  view.setFloat64(0, x);
  const bits = view.getBigUint64(0);
  view.setBigUint64(0, (x > 0) === up ? bits + 1n : bits - 1n);
  return view.getFloat64(0);
}

// Is there any double d with x2 + d == y (in float64)? Any preimage lies within ulp(y) / 2 of
// y - x2, so the doubles next to fl(y - x2) decide. For the old exp-gaussian this treats every
// double as a possible noise value, so the share it excludes is a lower bound.
export function reachableAnyNoise(y, x2) {
  let d = y - x2;
  for (let i = 0; i < 4; i++) d = nextAfter(d, false);
  for (let i = 0; i < 9; i++, d = nextAfter(d, true)) if (x2 + d === y) return true;
  return false;
}

// The grid step J of a release y = low + J * g (computed in that order), or null off the grid.
export function gridStep(y, low, g) {
  const guess = Math.round((y - low) / g);
  for (let j = guess - 2; j <= guess + 2; j++) if (low + j * g === y) return j;
  return null;
}

// After the fix: every integer J has positive probability under every answer (DL and N_Z with
// a scale > 0 charge every integer), so a release is reachable from every answer iff it is on
// the grid exactly.
export function reachableGrid(y, low, g) {
  return gridStep(y, low, g) !== null;
}

export function attackBefore(n) {
  // laplace at epsilon 1: scores 1..5, scale 5; the answer 3, its neighbours 2 and 4.
  // excluded_by_truth counts releases the attack wrongly calls impossible from their own answer.
  const lap = { excluded_by_2: 0, excluded_by_4: 0, excluded_by_some_other_score: 0, excluded_by_truth: 0 };
  for (let i = 0; i < n; i++) {
    const y = oldLaplaceRelease(3, 5);
    if (!reachableOldLaplace(y, 3, 5)) lap.excluded_by_truth++;
    if (!reachableOldLaplace(y, 2, 5)) lap.excluded_by_2++;
    if (!reachableOldLaplace(y, 4, 5)) lap.excluded_by_4++;
    if ([1, 2, 4, 5].some((x2) => !reachableOldLaplace(y, x2, 5))) lap.excluded_by_some_other_score++;
  }
  // exp-gaussian at epsilon 1 over [0, 10] (rate 1 / 200): the answer 3.3, the neighbour 4.1.
  const gauss = { excluded_by_4_1: 0, excluded_by_truth: 0 };
  for (let i = 0; i < n; i++) {
    const y = oldExpGaussianRelease(3.3, 1 / 200);
    if (!reachableAnyNoise(y, 3.3)) gauss.excluded_by_truth++;
    if (!reachableAnyNoise(y, 4.1)) gauss.excluded_by_4_1++;
  }
  return { releases: n, laplace: lap, exp_gaussian: gauss };
}

export function attackAfter(n) {
  const laplace = { name: "laplace", params: { scale: 5, low: 1, high: 5, fill: null } };
  const gaussian = { name: "exp-gaussian", params: { rate: 1 / 200, low: -3.7, high: 12.1, granularity: 15.8 / 1024 } };
  const out = { releases: n, laplace: { off_grid: 0, excluded: 0 }, exp_gaussian: { off_grid: 0, excluded: 0 } };
  for (let i = 0; i < n; i++) {
    const [[, y]] = perturbWorker(laplace, { t: 3 }, null, ["t"]);
    if (!Number.isInteger(y)) out.laplace.off_grid++;
    if (!reachableGrid(y, 0, 1)) out.laplace.excluded++;
    const [[, z]] = perturbWorker(gaussian, { t: 3.3 }, null, ["t"]);
    const p = gaussian.params;
    if (!reachableGrid(z, p.low, p.granularity)) out.exp_gaussian.excluded++;
    if (gridStep(z, p.low, p.granularity) === null) out.exp_gaussian.off_grid++;
  }
  return out;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const n = Number(process.argv[2] || 200000);
  let t = performance.now();
  const before = attackBefore(n);
  before.seconds = (performance.now() - t) / 1000;
  t = performance.now();
  const after = attackAfter(n);
  after.seconds = (performance.now() - t) / 1000;
  process.stdout.write(`${JSON.stringify({ before, after }, null, 1)}\n`);
}
