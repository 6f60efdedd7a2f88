// Verifies webhook deliveries with Stripe's official Node verifier (stripe.webhooks.constructEvent),
// the same `t=…,v1=…` scheme as Service-Signature. Reads [{body, header, secret}] on stdin and
// prints [{ok, id, error}].
const Stripe = require("stripe");

const stripe = new Stripe("sk_test_unused");
let input = "";
process.stdin.on("data", (c) => (input += c));
process.stdin.on("end", () => {
  const results = JSON.parse(input).map(({ body, header, secret }) => {
    try {
      const event = stripe.webhooks.constructEvent(body, header, secret, 300);
      return { ok: true, id: event.id, error: null };
    } catch (err) {
      return { ok: false, id: null, error: err.message };
    }
  });
  console.log(JSON.stringify(results));
});
