"""The provider's side of webhooks: signature schemes and the deliveries real providers make.

`harness.webhooks.schemes` signs (and, for tests and Python receivers, verifies) the way
Stripe, Standard Webhooks, GitHub and Shopify do; `harness.webhooks.events` makes events
from a template; `harness.webhooks.deliveries` plans and sends the deliveries a real
provider makes (first tries, retries with fresh signatures, copies, disorder, late
duplicates) and the bad ones a receiver must refuse. The probe and the payment provider
both build on this package; it imports neither (docs/webhooks.md).
"""
