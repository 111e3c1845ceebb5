// privtd's local mechanisms in the browser: the same output laws as privtd.mechanisms, drawn
// from the browser's cryptographically secure generator (crypto.getRandomValues). Only the
// perturbed values leave the page. tests/test_service_browser.py checks each law against the
// Python mechanism's with a chi-square test. The numeric mechanisms release on a public grid with
// exact discrete noise (exact.js; tests/test_page_exact.py).

import { releaseExpGaussian, releaseLaplace } from "./exact.js";

// A uniform double in [0, 1) with 53 random bits.
export function uniform() {
  const words = new Uint32Array(2);
  crypto.getRandomValues(words);
  return ((words[0] >>> 5) * 67108864 + (words[1] >>> 6)) / 9007199254740992;
}

function pick(n) {
  return Math.min(n - 1, Math.floor(uniform() * n));
}

// Keep with probability 1 - f, else one of the other n - 1 codes uniformly (P0's flip).
function flip(code, f, n) {
  if (uniform() >= f) return code;
  const other = pick(n - 1);
  return other >= code ? other + 1 : other;
}

// One worker's release. `answers` maps task key -> answer (a label, or a number), as a Map or
// an object; `tasks` is the campaign's task list (for the whole-row mechanisms); returns
// [[task, value]]. Throws, before drawing anything, on an answer the mechanism cannot take.
export function perturbWorker(mechanism, answers, labels, tasks) {
  answers = checkAnswers(mechanism, answers, labels, tasks);
  const p = mechanism.params;
  const entries = Object.entries(answers);
  switch (mechanism.name) {
    case "one-layer":
    case "binary-rr":
    case "two-layer": {
      // two-layer: the worker's own flip probability, drawn afresh for each call (one
      // submission), shared by its answers only, and never sent. ceiling.js's figures are per
      // call: the page checks and counts each submission as one draw.
      const f = mechanism.name === "two-layer" ? p.a + (p.b - p.a) * uniform() : p.f;
      return entries.map(([task, answer]) => {
        const code = labels.map(String).indexOf(String(answer));
        if (code < 0) throw new Error(`answer ${answer} is not one of ${labels}`);
        return [task, labels[flip(code, f, labels.length)]];
      });
    }
    case "exp-gaussian":
      // One secret variance per call: the page releases all of a worker's answers in one call.
      return releaseExpGaussian(p, answers);
    case "krr-null":
    case "two-layer-null": {
      const g = p.high - p.low + 1;
      let keep = p.keep;
      if (mechanism.name === "two-layer-null") {
        const eps = 2 * p.mean_epsilon * uniform(); // the worker's private budget
        keep = Math.exp(eps) / (g + Math.exp(eps));
      }
      return tasks.map((task) => {
        // Symbols 0..g-1 are the scores low..high, g is NULL.
        const z = task in answers ? Number(answers[task]) - p.low : g;
        if (z < g && !(Number.isInteger(z) && z >= 0)) throw new Error(`answer ${answers[task]} outside ${p.low}..${p.high}`);
        const out = flip(z, 1 - keep, g + 1);
        return [task, out === g ? null : p.low + out];
      });
    }
    case "laplace":
      return releaseLaplace(p, answers, tasks);
    default:
      throw new Error(`mechanism ${mechanism.name} is not available in the browser`);
  }
}

// The answers as an object without a prototype, each checked against the campaign's answer
// domain: an answer outside it is refused with a message, never perturbed unchecked nor
// turned into a NULL report, and a task named like an Object property ("constructor",
// "__proto__") is an ordinary key, never an inherited value.
export function checkAnswers(mechanism, answers, labels, tasks) {
  const p = mechanism.params;
  const known = tasks ? new Set(tasks) : null;
  const entries = answers instanceof Map ? [...answers] : Object.entries(answers);
  const out = Object.create(null);
  // laplace too: its answers are integer scores, released on the integer grid.
  const integral = ["krr-null", "two-layer-null", "laplace"].includes(mechanism.name);
  for (const [task, answer] of entries) {
    if (known && !known.has(task)) {
      throw new Error(`task ${JSON.stringify(task)} is not one of the campaign's tasks`);
    }
    if (labels) {
      if (!labels.map(String).includes(String(answer))) {
        throw new Error(`answer ${JSON.stringify(answer)} to task ${JSON.stringify(task)} is not one of ${labels.join(", ")}`);
      }
    } else if (!(typeof answer === "number" && answer >= p.low && answer <= p.high
                 && (!integral || Number.isInteger(answer)))) {
      const kind = integral ? "an integer" : "a number";
      throw new Error(`answer ${JSON.stringify(answer)} to task ${JSON.stringify(task)} is not ${kind} from ${p.low} to ${p.high}`);
    }
    out[task] = answer;
  }
  return out;
}

// A page form's answers ([task, text] pairs, text "" for a skipped task) as a Map of labels
// or numbers, ready for perturbWorker; throws on text that is no number.
export function collectAnswers(pairs, labels) {
  const answers = new Map();
  for (const [task, text] of pairs) {
    if (text === "") continue;
    if (labels) {
      answers.set(task, labels.find((l) => String(l) === text));
    } else {
      const x = Number(text);
      if (text.trim() === "" || !Number.isFinite(x)) {
        throw new Error(`answer ${JSON.stringify(text)} to task ${JSON.stringify(task)} is not a number`);
      }
      answers.set(task, x);
    }
  }
  return answers;
}
