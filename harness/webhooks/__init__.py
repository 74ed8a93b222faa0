"""The provider's side of webhooks: signature schemes and the deliveries real providers make.

`harness.webhooks.schemes` signs (and, for tests and Python receivers, verifies) the way
Stripe, Standard Webhooks, GitHub and Shopify do; `events` makes events from a template;
`deliveries` signs them into the deliveries a real provider makes (first tries, retries
with fresh signatures, copies, disorder, late duplicates) and the bad ones a receiver
must refuse; `sender` sends them over HTTP and retries like a provider; `config` checks
one endpoint's configuration. The probe and the payment provider both build on this
package; it imports neither (docs/webhooks.md).
"""
