// The worker's own ceiling in the browser: the largest epsilon per answer (given the worker's
// other answers of the same submission) a campaign may use on this worker's answers, and the
// total over every campaign, kept in this browser's localStorage (one per browser profile and
// server). The page checks a campaign before enrolling and every submission before perturbing;
// above the ceiling nothing is sent. Every figure is computed here, from the parameters the
// page perturbs with; where the page cannot compute one it refuses (fails closed) rather than
// take the server's word. The defaults are privtd.client's (docs/service.md says why).

export const DEFAULT_PER_ANSWER = 3;
export const DEFAULT_LIFETIME = 100;
const KEY = "privtd:ceiling";

export function loadCeiling(storage) {
  const saved = JSON.parse(storage.getItem(KEY) || "null") || {};
  return {
    perAnswer: Number(saved.perAnswer ?? DEFAULT_PER_ANSWER),
    lifetime: Number(saved.lifetime ?? DEFAULT_LIFETIME),
    spent: saved.spent || {},
  };
}

export function saveCeiling(storage, ceiling) {
  storage.setItem(KEY, JSON.stringify(ceiling));
}

export function lifetimeTotal(ceiling) {
  return Object.values(ceiling.spent).reduce((a, b) => a + Number(b), 0);
}

// The epsilon per answer the public parameters mean, recomputed here from the parameters the
// page perturbs with (the same formulas as privtd.mechanisms), rather than trusting the figure
// the server states next to them. NaN for a mechanism the page does not know.
export function epsilonOf(mechanism, labels) {
  const p = mechanism.params;
  const flip = (f, k) => Math.abs(Math.log((1 - f) * (k - 1)) - Math.log(f));
  const k = labels ? labels.length : p.n_labels;
  switch (mechanism.name) {
    case "one-layer":
    case "binary-rr":
      return flip(p.f, mechanism.name === "binary-rr" ? 2 : k);
    case "two-layer":
      return flip((p.a + p.b) / 2, k);
    case "krr-null": {
      const g = p.high - p.low + 1;
      return Math.abs(Math.log((p.keep * g) / (1 - p.keep)));
    }
    case "two-layer-null": {
      const g = p.high - p.low + 1, top = 2 * p.mean_epsilon;
      const other = (top - Math.log(g + Math.exp(top)) + Math.log(g + 1)) / (g * top);
      return Math.log((1 - g * other) / other);
    }
    case "laplace": // discrete Laplace on the integer scores: a base moves high - low steps
      return (p.high - p.low) / p.scale;
    case "exp-gaussian": { // the range in whole grid steps, n g, times sqrt(2 rate)
      const g = p.granularity ?? (p.high - p.low) / 1024;
      const n = Math.floor((p.high - p.low) / g + 0.5);
      return n * g * Math.sqrt(2 * p.rate);
    }
    default:
      return NaN;
  }
}

// --- what k answers released under one private draw keep ----------------------------------
// perturb.js draws two-layer's flip probability (exp-gaussian's variance, two-layer-null's
// budget) afresh for each submission, shared by that submission's answers only. A mechanism
// whose answers are independent keeps its epsilon per answer given the others, and k times it
// for all k. Two-layer's answers share f ~ U(a, b): the figures below mirror
// privtd.mechanisms._shared_draw (its docstring derives them); tests/test_page_exact.py checks
// they agree with Python's to 1e-9 relative.

const INDEPENDENT = new Set(["one-layer", "binary-rr", "krr-null", "laplace"]);

// Gauss-Legendre nodes and weights on [-1, 1]: Newton's iteration on the Legendre polynomial
// (numpy's leggauss, which _shared_draw.py uses, gives the same to rounding).
function gaussLegendre(n) {
  const x = new Float64Array(n), w = new Float64Array(n);
  for (let i = 0; i < Math.floor((n + 1) / 2); i++) {
    let z = Math.cos((Math.PI * (i + 0.75)) / (n + 0.5)), dp = 0;
    for (let iteration = 0; iteration < 100; iteration++) {
      let p1 = 1, p2 = 0;
      for (let j = 1; j <= n; j++) {
        const p3 = p2;
        p2 = p1;
        p1 = ((2 * j - 1) * z * p2 - (j - 1) * p3) / j;
      }
      dp = (n * (z * p1 - p2)) / (z * z - 1);
      const step = p1 / dp;
      z -= step;
      if (Math.abs(step) <= 1e-16) break;
    }
    x[i] = -z; x[n - 1 - i] = z;
    w[i] = w[n - 1 - i] = 2 / ((1 - z * z) * dp * dp);
  }
  return [x, w];
}

const [NODES, WEIGHTS] = gaussLegendre(48);
const PANELS = 8;
const WIDTH = 40; // the window's half-width in the integrand's own length scale
const TERMS = new Float64Array(PANELS * 48); // one integral's log terms, reused

const logPower = (p, x) => (p === 0 ? 0 : p * Math.log(x)); // 0 ln 0 = 0

// ln E[(1 - f)^m f^n] for f ~ U(a, b) (f = a when a == b): Gauss-Legendre over a window around
// the log-concave integrand's peak, in log space (_shared_draw.log_uniform_moments).
export function logUniformMoment(m, n, a, b) {
  if (b - a <= 0) return logPower(n, a) + logPower(m, 1 - a);
  const total = m + n;
  const peak = Math.min(Math.max(total > 0 ? n / total : a, a), b);
  const fp = Math.min(Math.max(peak, 1e-300), 1 - 1e-16);
  const curvature = n / fp ** 2 + m / (1 - fp) ** 2;
  const slope = Math.abs(n / fp - m / (1 - fp));
  let scale = Math.min(curvature > 0 ? 1 / Math.sqrt(curvature) : Infinity,
                       slope > 0 ? 1 / slope : Infinity);
  if (!Number.isFinite(scale)) scale = b - a;
  const lo = Math.max(a, peak - WIDTH * scale), hi = Math.min(b, peak + WIDTH * scale);
  let top = -Infinity;
  for (let p = 0; p < PANELS; p++) {
    const left = lo + (hi - lo) * (p / PANELS), right = lo + (hi - lo) * ((p + 1) / PANELS);
    const half = (right - left) / 2;
    for (let j = 0; j < NODES.length; j++) {
      const x = left + half * (NODES[j] + 1);
      const t = logPower(n, x) + logPower(m, 1 - x) + Math.log(WEIGHTS[j] * half);
      TERMS[p * NODES.length + j] = t;
      if (t > top) top = t;
    }
  }
  if (!Number.isFinite(top)) top = 0;
  let sum = 0;
  for (const t of TERMS) sum += Math.exp(t - top);
  return top + Math.log(sum) - Math.log(b - a);
}

const sharedCache = new Map();

// [one answer given the other k - 1, the whole release of k] when k answers over s labels share
// one flip probability f ~ U(a, b): from l(m) = ln E[(1 - f)^m (f / (s - 1))^(k - m)],
// max |l(m) - l(m - 1)| and max l - min l (_shared_draw.shared_flip_epsilons).
export function sharedFlipEpsilons(k, s, a, b) {
  if (k < 1) return [0, 0];
  const key = `${k} ${s} ${a} ${b}`;
  if (sharedCache.has(key)) return sharedCache.get(key);
  let step = 0, most = -Infinity, least = Infinity, previous = null, out = null;
  for (let m = 0; m <= k; m++) {
    const l = logUniformMoment(m, k - m, a, b) - (k - m) * Math.log(s - 1);
    if (!Number.isFinite(l)) { out = [Infinity, Infinity]; break; }
    if (previous !== null) step = Math.max(step, Math.abs(l - previous));
    most = Math.max(most, l); least = Math.min(least, l); previous = l;
  }
  out ??= [step, most - least];
  sharedCache.set(key, out);
  return out;
}

// {perAnswer, whole}: epsilon per answer given the worker's other k - 1 answers of the same
// draw, and of all k together, computed from the public parameters; null where the page cannot
// compute them (a mechanism whose answers share a secret draw it has no figures for).
export function releaseFigures(mechanism, labels, k) {
  if (INDEPENDENT.has(mechanism.name)) {
    const eps = epsilonOf(mechanism, labels);
    return { perAnswer: k > 0 ? eps : 0, whole: k * eps };
  }
  if (mechanism.name === "two-layer") {
    const p = mechanism.params;
    const s = labels ? labels.length : p.n_labels;
    const [perAnswer, whole] = sharedFlipEpsilons(k, s, Number(p.a), Number(p.b));
    return { perAnswer, whole };
  }
  return null;
}

// The largest j <= k whose per-answer figure is within `limit` (0 if none); it grows with j
// where answers share a draw. Doubling, then halving, as privtd.client.largest_release.
export function largestRelease(mechanism, labels, limit, k) {
  const within = (j) => releaseFigures(mechanism, labels, j).perAnswer <= limit * (1 + 1e-9);
  let lo = 0, hi = 1;
  while (hi < k && within(hi)) { lo = hi; hi = Math.min(2 * hi, k); }
  if (hi === k && within(k)) return k;
  hi -= 1;
  while (lo < hi) {
    const mid = Math.floor((lo + hi + 1) / 2);
    if (within(mid)) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// The fewest answers one submission releases: one, or the whole row (P3's mechanisms).
export const leastRelease = (campaign) => (campaign.whole_row ? campaign.n_tasks : 1);

// The unit of the per-answer figure, in words.
export function perAnswerWords(unit, k) {
  return k <= 1 ? `per ${unit}` : `per ${unit}, given your other ${k - 1} ${unit}s of the same submission`;
}

// null if releasing k answers of the campaign in one submission (default: the fewest one
// submission releases) keeps each within the ceiling, else the reason, one line.
export function refuseCampaign(ceiling, campaign, k = leastRelease(campaign)) {
  const m = campaign.mechanism;
  const figures = releaseFigures(m, campaign.labels, k);
  if (figures === null) {
    return `Refused here: this page cannot compute what ${m.name} keeps per ${m.unit} when ` +
      "your answers share one private draw, and does not take the server's word for it; " +
      "nothing was sent. Use the Python client (privtd client), which computes it.";
  }
  // The server's stated figure can only make the check stricter.
  const eps = Math.max(Number(m.epsilon), figures.perAnswer);
  if (eps <= ceiling.perAnswer * (1 + 1e-9)) return null; // NaN refused too
  if (k > 1 && !campaign.whole_row) {
    const fits = largestRelease(m, campaign.labels, ceiling.perAnswer, k);
    if (fits > 0) {
      return `Refused here: sending these ${k} answers together means epsilon ` +
        `${eps.toPrecision(4)} ${perAnswerWords(m.unit, k)}, above your ceiling of ` +
        `${ceiling.perAnswer}; nothing was sent. Send at most ${fits} per submission (each ` +
        "submission draws afresh), or raise your ceiling below only if you accept that.";
    }
  }
  return `Refused here: this campaign perturbs with epsilon ${eps.toPrecision(4)} ` +
    `${perAnswerWords(m.unit, k)}, above your ceiling of ${ceiling.perAnswer}; nothing was ` +
    "sent. Raise your ceiling below only if you accept that.";
}

// null if spending up to `campaignTotal` in campaign `key` keeps the lifetime total within the
// ceiling, else the reason.
export function refuseSpend(ceiling, key, campaignTotal) {
  const total = lifetimeTotal(ceiling) - Number(ceiling.spent[key] || 0) + campaignTotal;
  if (total <= ceiling.lifetime * (1 + 1e-12)) return null;
  return `Refused here: this would take your total over all campaigns to epsilon ` +
    `${total.toFixed(3)}, past your lifetime ceiling of ${ceiling.lifetime}; nothing was sent.`;
}

// Counts campaign `key`'s total, over what the storage holds now: another tab of this browser
// may have recorded a spend since `ceiling` was read, and that stays counted.
export function record(storage, ceiling, key, campaignTotal) {
  const now = loadCeiling(storage);
  now.spent[key] = Math.max(Number(now.spent[key] || 0), Number(ceiling.spent[key] || 0),
    campaignTotal);
  saveCeiling(storage, now);
  ceiling.spent = now.spent;
}

// What campaign `key` has spent before a new submission, for its checks and its record: the
// largest of the states given (this tab's, and the one another tab of the campaign stored
// since) and the campaign's figure in the ledger, which counts every tab's releases.
export function spentBefore(ceiling, key, ...states) {
  const figures = states.filter((x) => x).map((x) => Number(x.spent) || 0);
  return Math.max(Number(ceiling.spent[key] || 0), ...figures);
}

// Runs `fn` (check the ceiling, perturb, record) as one step for every tab of this browser
// and server, under the Web Locks API, so that two tabs cannot both pass a lifetime total only
// one of them fits. Web Locks exist in secure contexts only (https, or localhost); over plain
// http from another host `fn` runs unlocked, and only `record`'s re-read protects the total.
export async function withCeilingLock(fn) {
  const locks = globalThis.navigator?.locks;
  if (locks && typeof locks.request === "function") return locks.request(KEY, fn);
  return fn();
}

// The most of `k` answers one submission may carry whose figures keep within `room` for the
// whole release and the ceiling per answer (0 if none; all or nothing for a whole row).
export function answersWithin(mechanism, labels, ceiling, room, k, wholeRow = false) {
  const within = (j) => {
    const f = releaseFigures(mechanism, labels, j);
    return f !== null && f.whole <= room * (1 + 1e-12) && f.perAnswer <= ceiling.perAnswer * (1 + 1e-9);
  };
  if (wholeRow) return within(k) ? k : 0;
  let lo = 0, hi = 1;
  while (hi < k && within(hi)) { lo = hi; hi = Math.min(2 * hi, k); }
  if (hi === k && within(k)) return k;
  hi -= 1;
  while (lo < hi) {
    const mid = Math.floor((lo + hi + 1) / 2);
    if (within(mid)) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// What the campaign would cost this worker, shown before the first answer: `all`, the tasks
// it may answer (every task, or the campaign's cap per worker, at most one submission's
// 20,000); `cost`, the epsilon of answering them all in one submission; `room`, what it may
// still spend here (the campaign's budget left, and its lifetime ceiling left: the same sum
// refuseSpend checks); `fits`, the most tasks one submission can answer within both and the
// per-answer ceiling; `text`, one paragraph saying so. null where the page has no figures.
export function campaignPlan(ceiling, campaign, key, spent = 0) {
  const m = campaign.mechanism;
  const cap = campaign.max_answers_per_worker ?? campaign.n_tasks;
  const all = campaign.whole_row ? campaign.n_tasks : Math.min(campaign.n_tasks, cap, 20000);
  const figures = releaseFigures(m, campaign.labels, all);
  if (figures === null) return null;
  const budgetLeft = Number(campaign.budget) - spent;
  const lifetimeLeft = ceiling.lifetime - (lifetimeTotal(ceiling) - Number(ceiling.spent[key] || 0)) - spent;
  const room = Math.max(Math.min(budgetLeft, lifetimeLeft), 0);
  const fits = answersWithin(m, campaign.labels, ceiling, room, all, campaign.whole_row);
  const capped = !campaign.whole_row && cap < campaign.n_tasks
    ? ` (of ${campaign.n_tasks}: the campaign takes at most ${cap} per worker)` : "";
  let text = `Answering all ${all} tasks${capped} in one submission costs epsilon ` +
    `${figures.whole.toFixed(3)}. You can still spend ${room.toFixed(3)} here (the campaign's ` +
    `budget leaves ${Math.max(budgetLeft, 0).toFixed(3)}; your lifetime ceiling of ` +
    `${ceiling.lifetime} leaves ${Math.max(lifetimeLeft, 0).toFixed(3)}): `;
  if (fits >= all) {
    text += `you can answer all ${all}.`;
  } else if (campaign.whole_row) {
    text += `your whole row does not fit, so you cannot take part as things stand.`;
  } else {
    text += `you can answer ${fits} of the ${all} tasks in one submission; answer at most ${fits}`;
    if (figures.whole > room * (1 + 1e-12)) {
      text += lifetimeLeft < budgetLeft
        ? ", or raise your lifetime ceiling below only if you accept that."
        : "; the campaign's budget allows no more.";
    } else {
      text += " at once (more would pass your ceiling per answer; each submission draws afresh).";
    }
  }
  return { all, cost: figures.whole, room, fits, text };
}
