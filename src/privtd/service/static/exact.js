// Exact samplers for the page's numeric mechanisms, with integer (BigInt) arithmetic and the
// browser's cryptographically secure generator (crypto.getRandomValues) as the only source.
//
// Noise computed in floating point breaks differential privacy: the set of doubles a release
// can take depends on the true answer, so most releases rule the neighbouring answers out
// (Mironov, "On significance of the least significant bits for differential privacy", CCS
// 2012). Here every numeric release lies on a public grid and its noise follows an exact
// discrete law, sampled as in Canonne, Kamath and Steinke, "The Discrete Gaussian for
// Differential Privacy" (NeurIPS 2020): Algorithm 1 (Bernoulli(exp(-gamma)) for a rational
// gamma), Algorithm 2 (discrete Laplace) and Algorithm 3 (discrete Gaussian). No decision
// below depends on a floating-point value, except where noted: the secret variance of
// exp-gaussian, whose law privtd's epsilon accounts for as sampled.
//
// The laws and grids are privtd's (docs/privacy.md), the same as privtd.mechanisms' in Python.

// Random 32-bit words, drawn from crypto.getRandomValues in blocks (one call per word would
// cost more than the sampling); a word is zeroed once used.
const POOL = new Uint32Array(1024);
let poolAt = POOL.length;

function word() {
  if (poolAt === POOL.length) {
    crypto.getRandomValues(POOL);
    poolAt = 0;
  }
  const w = POOL[poolAt];
  POOL[poolAt++] = 0;
  return w;
}

const TWO32 = 4294967296;
const TWO53 = 9007199254740992;
const BIG_TWO53 = 9007199254740992n;

// A uniform integer in [0, n) for an integer 1 <= n <= 2^53, by rejection: draw as many bits
// as n - 1 has and retry above n - 1 (fewer than two tries on average). Every value handled is
// an integer below 2^53, so Number arithmetic is exact here.
function belowNumber(n) {
  if (n === 1) return 0;
  const top = n - 1;
  if (top < TWO32) {
    const mask = top >= 0x80000000 ? 0xffffffff : 2 ** (32 - Math.clz32(top)) - 1;
    for (;;) {
      const r = (word() & mask) >>> 0;
      if (r < n) return r;
    }
  }
  const hiMask = 2 ** (32 - Math.clz32(Math.floor(top / TWO32))) - 1;
  for (;;) {
    const r = ((word() & hiMask) >>> 0) * TWO32 + word();
    if (r < n) return r;
  }
}

function bitLength(n) {
  return n === 0n ? 0 : n.toString(2).length;
}

/**
 * A uniform integer in [0, n) (BigInt n >= 1), by rejection on the bits of n - 1.
 * @param {bigint} n
 * @returns {bigint}
 */
export function uniformBelow(n) {
  if (n < 1n) throw new RangeError(`uniformBelow needs n >= 1; got ${n}`);
  if (n <= BIG_TWO53) return BigInt(belowNumber(Number(n)));
  const bits = bitLength(n - 1n);
  const words = Math.ceil(bits / 32);
  const topMask = BigInt(2 ** (bits - 32 * (words - 1)) - 1);
  for (;;) {
    let r = BigInt(word()) & topMask;
    for (let i = 1; i < words; i++) r = (r << 32n) | BigInt(word());
    if (r < n) return r;
  }
}

/**
 * Bernoulli(p / q) for integers 0 <= p <= q, q >= 1. Small q by rejection; large q by comparing
 * the digits (base 2^32) of a uniform real with those of p / q, drawn until they differ.
 * @param {bigint} p
 * @param {bigint} q
 * @returns {boolean}
 */
export function bernoulli(p, q) {
  if (!(p >= 0n && p <= q && q >= 1n)) throw new RangeError(`bernoulli needs 0 <= p <= q; got ${p}/${q}`);
  if (q <= BIG_TWO53) return belowNumber(Number(q)) < Number(p);
  let r = p;
  for (;;) {
    r <<= 32n;
    const digit = r / q; // the next base-2^32 digit of p / q, in [0, 2^32]
    r %= q;
    const w = BigInt(word());
    if (w !== digit) return w < digit;
    if (r === 0n) return false; // p / q ends here; the uniform's remaining digits make it >= p / q
  }
}

// Bernoulli(exp(-num / den)) for 0 <= num <= den (CKS Algorithm 1, gamma in [0, 1]): the parity
// of the first K with a failed Bernoulli(gamma / K). Bernoulli(gamma / K) is drawn as
// Bernoulli(1 / K) and Bernoulli(gamma), independent, whose product has that probability.
function bernoulliExpUnit(num, den) {
  for (let k = 1; ; k++) {
    const success = belowNumber(k) === 0 && (num === den || bernoulli(num, den));
    if (!success) return k % 2 === 1;
  }
}

/**
 * Bernoulli(exp(-num / den)) for integers num >= 0, den >= 1 (Canonne, Kamath and Steinke 2020,
 * Algorithm 1): floor(gamma) draws of Bernoulli(exp(-1)), then one of exp(-(gamma - floor)).
 * @param {bigint} num
 * @param {bigint} den
 * @returns {boolean}
 */
export function bernoulliExp(num, den) {
  if (!(num >= 0n && den >= 1n)) throw new RangeError(`bernoulliExp needs gamma >= 0; got ${num}/${den}`);
  while (num > den) {
    if (!bernoulliExpUnit(1n, 1n)) return false;
    num -= den;
  }
  return bernoulliExpUnit(num, den);
}

/**
 * The discrete Laplace law DL(t), P(X = x) proportional to exp(-|x| / t), x integer, for the
 * rational scale t = num / den > 0 (Canonne, Kamath and Steinke 2020, Algorithm 2, with their
 * t = num and s = den).
 * @param {bigint} num
 * @param {bigint} den
 * @returns {bigint}
 */
export function discreteLaplace(num, den) {
  if (!(num >= 1n && den >= 1n)) throw new RangeError(`discreteLaplace needs a scale > 0; got ${num}/${den}`);
  for (;;) {
    const u = uniformBelow(num);
    if (!bernoulliExp(u, num)) continue;
    let v = 0n;
    while (bernoulliExpUnit(1n, 1n)) v++;
    const y = (u + num * v) / den; // BigInt division floors for non-negative operands
    const negative = (word() & 1) === 1;
    if (negative && y === 0n) continue;
    return negative ? -y : y;
  }
}

function isqrt(n) {
  if (n < 2n) return n;
  let x = 1n << BigInt(Math.ceil(bitLength(n) / 2)); // x >= sqrt(n)
  for (;;) {
    const next = (x + n / x) >> 1n;
    if (next >= x) return x;
    x = next;
  }
}

/**
 * The discrete Gaussian N_Z(0, sigma^2), P(X = x) proportional to exp(-x^2 / (2 sigma^2)),
 * x integer, for the rational variance sigma^2 = num / den >= 0 (Canonne, Kamath and Steinke
 * 2020, Algorithm 3: discrete Laplace proposals with scale t = floor(sigma) + 1, each accepted
 * with probability exp(-(|Y| - sigma^2 / t)^2 / (2 sigma^2))). sigma^2 = 0 gives 0.
 * @param {bigint} num
 * @param {bigint} den
 * @returns {bigint}
 */
export function discreteGaussian(num, den) {
  if (!(num >= 0n && den >= 1n)) throw new RangeError(`discreteGaussian needs a variance >= 0; got ${num}/${den}`);
  if (num === 0n) return 0n;
  const t = isqrt(num / den) + 1n; // floor(sqrt(num / den)) = isqrt(floor(num / den))
  const bottom = 2n * num * den * t * t;
  for (;;) {
    const y = discreteLaplace(t, 1n);
    // (|Y| - sigma^2 / t)^2 / (2 sigma^2) = (|Y| den t - num)^2 / (2 num den t^2)
    const a = (y < 0n ? -y : y) * den * t - num;
    if (bernoulliExp(a * a, bottom)) return y;
  }
}

/**
 * The exact value of a finite double as a reduced fraction [num, den] of BigInts, den a power
 * of two, read from its IEEE 754 bits.
 * @param {number} x
 * @returns {[bigint, bigint]}
 */
export function floatToRational(x) {
  if (typeof x !== "number" || !Number.isFinite(x)) throw new RangeError(`expected a finite number; got ${x}`);
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const hi = view.getUint32(0);
  const lo = view.getUint32(4);
  const biased = (hi >>> 20) & 0x7ff;
  let mantissa = (BigInt(hi & 0xfffff) << 32n) | BigInt(lo);
  let exponent = -1074; // subnormal: mantissa * 2^-1074
  if (biased !== 0) {
    mantissa |= 1n << 52n;
    exponent = biased - 1075;
  }
  if (mantissa === 0n) return [0n, 1n];
  while ((mantissa & 1n) === 0n && exponent < 0) {
    mantissa >>= 1n;
    exponent++;
  }
  if (hi >>> 31) mantissa = -mantissa;
  return exponent >= 0 ? [mantissa << BigInt(exponent), 1n] : [mantissa, 1n << BigInt(-exponent)];
}

function has(answers, task) {
  return Object.prototype.hasOwnProperty.call(answers, task);
}

function positive(name, value, mechanism) {
  if (typeof value !== "number" || !(value > 0) || !Number.isFinite(value)) {
    throw new Error(`${mechanism}'s '${name}' must be a finite number > 0; the campaign gives ${value}.`);
  }
  return value;
}

function safeRelease(value, mechanism) {
  // Beyond 2^53 a double no longer holds every integer: the grid would have holes.
  if (!Number.isSafeInteger(value)) throw new Error(`${mechanism}: a release left the grid (${value} steps); its parameters are out of range.`);
  return value;
}

/**
 * One worker's `laplace` release (P3's Laplace with NULL filled): every task of the campaign
 * gets its integer base (the score, or the fill for a NULL: the campaign's constant, or a
 * uniform score) plus discrete Laplace noise DL(scale) on the integers.
 * @param {{scale: number, low: number, high: number, fill?: number|null}} p
 * @param {Object<string, number>} answers task key -> integer score in [low, high]
 * @param {string[]} tasks the campaign's task keys
 * @returns {Array<[string, number]>}
 */
export function releaseLaplace(p, answers, tasks) {
  const [num, den] = floatToRational(positive("scale", p.scale, "laplace"));
  const { low, high } = p;
  if (!Number.isSafeInteger(low) || !Number.isSafeInteger(high) || !(low <= high)) {
    throw new Error(`laplace needs integer scores low <= high; the campaign gives ${low}..${high}.`);
  }
  const fill = p.fill === null || p.fill === undefined ? null : p.fill;
  if (fill !== null && !(Number.isInteger(fill) && fill >= low && fill <= high)) {
    throw new Error(`laplace's fill must be an integer score in ${low}..${high}; the campaign gives ${fill}.`);
  }
  return tasks.map((task) => {
    let base;
    if (has(answers, task)) {
      base = Number(answers[task]);
      if (!(Number.isInteger(base) && base >= low && base <= high)) {
        throw new Error(`The answer to task ${task} must be an integer score in ${low}..${high}; got ${answers[task]}.`);
      }
    } else {
      base = fill !== null ? fill : low + belowNumber(high - low + 1);
    }
    return [task, safeRelease(base + Number(discreteLaplace(num, den)), "laplace")];
  });
}

/**
 * The grid of an `exp-gaussian` campaign: granularity g, n = floor((high - low) / g + 0.5)
 * steps, and the code k = floor((x - low) / g + 0.5), clipped to [0, n], of an answer x.
 * @param {{low: number, high: number, granularity: number}} p
 */
export function expGaussianGrid(p) {
  if (p.granularity === undefined || p.granularity === null) {
    throw new Error("This exp-gaussian campaign gives no 'granularity': the page releases numbers only on a public grid; ask the requester to re-create the campaign with a current privtd.");
  }
  const g = positive("granularity", p.granularity, "exp-gaussian");
  const { low, high } = p;
  if (!(Number.isFinite(low) && Number.isFinite(high) && low < high)) {
    throw new Error(`exp-gaussian needs finite low < high; the campaign gives [${low}, ${high}].`);
  }
  const n = Math.floor((high - low) / g + 0.5);
  if (!(n >= 1 && n < TWO53)) throw new Error(`exp-gaussian's granularity ${g} gives ${n} steps over [${low}, ${high}]; it needs 1 to 2^53.`);
  const code = (x) => Math.min(n, Math.max(0, Math.floor((x - low) / g + 0.5)));
  return { low, g, n, code };
}

/**
 * An Exp(1) draw with the law's whole tail: -ln(u) for u = 2^-e (1 + f), e >= 1 the position of
 * the first 1 in an unbounded stream of random bits (P(e = k) = 2^-k) and f a 53-bit uniform in
 * [0, 1), so u is uniform on (0, 1) to any depth: -ln(u) = e ln 2 - log1p(f). (-ln of a 53-bit
 * uniform stops at 53 ln 2, and exp-gaussian's epsilon needs the exponential's tail.)
 * @returns {number}
 */
export function exponential() {
  let e = 1;
  for (;;) {
    const w = word();
    if (w !== 0) {
      e += Math.clz32(w);
      break;
    }
    e += 32;
  }
  return e * Math.LN2 - Math.log1p(belowNumber(TWO53) / TWO53);
}

/**
 * The secret noise scale of one exp-gaussian worker, in grid steps: v ~ Exp(rate) drawn as
 * exponential() / rate, and s = floor(sqrt(v) / g * 2^30 + 0.5) / 2^30. Returned as the
 * integer S = s * 2^30 (a BigInt), so that s^2 = S^2 / 2^60 exactly.
 * @param {number} rate
 * @param {number} g
 * @returns {bigint}
 */
export function expGaussianScale(rate, g) {
  const v = exponential() / rate;
  const scaled = Math.floor((Math.sqrt(v) / g) * 1073741824 + 0.5);
  if (!Number.isFinite(scaled)) throw new Error(`exp-gaussian's rate ${rate} and granularity ${g} give an infinite noise scale.`);
  return BigInt(scaled);
}

/**
 * One worker's `exp-gaussian` release (P1): one secret scale s for the call (one call is one
 * worker's answers), then each answer's code k moves to k + N_Z(0, s^2) and is released as
 * low + k' * g, exactly so in float64.
 * @param {{rate: number, low: number, high: number, granularity: number}} p
 * @param {Object<string, number>} answers task key -> answer in [low, high]
 * @returns {Array<[string, number]>}
 */
export function releaseExpGaussian(p, answers) {
  const rate = positive("rate", p.rate, "exp-gaussian");
  const grid = expGaussianGrid(p);
  const entries = Object.entries(answers).map(([task, answer]) => {
    const x = Number(answer);
    if (!(x >= grid.low && x <= p.high)) {
      throw new Error(`The answer to task ${task} must be a number in [${grid.low}, ${p.high}]; got ${answer}.`);
    }
    return [task, grid.code(x)];
  });
  const scale = expGaussianScale(rate, grid.g);
  const num = scale * scale;
  const den = 1n << 60n;
  return entries.map(([task, k]) => {
    const released = safeRelease(k + Number(discreteGaussian(num, den)), "exp-gaussian");
    return [task, grid.low + released * grid.g];
  });
}
