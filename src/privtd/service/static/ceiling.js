// The worker's own ceiling in the browser (issue 31, point 5): the largest epsilon per answer a
// campaign may use on this worker's answers, and the total over every campaign, kept in this
// browser's localStorage (one per browser profile and server). The page checks a campaign
// before enrolling and every submission before perturbing; above the ceiling nothing is sent.
// The defaults are privtd.client's (docs/service.md says why).

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

// null if the campaign is within the ceiling, else the reason, one line.
export function refuseCampaign(ceiling, campaign) {
  const eps = Math.max(Number(campaign.mechanism.epsilon), epsilonOf(campaign.mechanism, campaign.labels));
  if (eps <= ceiling.perAnswer * (1 + 1e-9)) return null; // NaN refused too
  return `Refused here: this campaign perturbs with epsilon ${eps.toPrecision(4)} per ` +
    `${campaign.mechanism.unit}, above your ceiling of ${ceiling.perAnswer}; nothing was sent. ` +
    "Raise your ceiling below only if you accept that.";
}

// null if spending up to `campaignTotal` in campaign `key` keeps the lifetime total within the
// ceiling, else the reason.
export function refuseSpend(ceiling, key, campaignTotal) {
  const total = lifetimeTotal(ceiling) - Number(ceiling.spent[key] || 0) + campaignTotal;
  if (total <= ceiling.lifetime * (1 + 1e-12)) return null;
  return `Refused here: this would take your total over all campaigns to epsilon ` +
    `${total.toFixed(3)}, past your lifetime ceiling of ${ceiling.lifetime}; nothing was sent.`;
}

export function record(storage, ceiling, key, campaignTotal) {
  ceiling.spent[key] = Math.max(Number(ceiling.spent[key] || 0), campaignTotal);
  saveCeiling(storage, ceiling);
}
