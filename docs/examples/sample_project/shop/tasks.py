"""The shop's handlers. The App reads its database from PGSCHED_DSN."""

from pgsched import App, RetryPolicy

app = App()

# What the receipt handler "sent" (a real shop would call a mail service here).
SENT: list[str] = []
# Addresses the mail service refuses for good.
BOUNCING = {"nobody@invalid"}


@app.handler("send_receipt", retry=RetryPolicy(base_seconds=30, cap_seconds=300))
def send_receipt(ctx):
    email = ctx.payload["email"]
    if email in BOUNCING:
        raise RuntimeError(f"mailbox {email} does not exist")
    SENT.append(f"order {ctx.payload['order']} to {email}")
