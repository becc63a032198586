"""Bank policy actions (bank/policy.md, "WRITE actions and rules") and the tasks that use them.

Tools: initiate_transfer_to_beneficiary, initiate_internal_transfer, make_loan_payment,
verify_beneficiary and add_beneficiary (a create). Each checks the policy's constraints (ownership,
active accounts and beneficiaries, verification, allowed source accounts, per-transfer limit, account
type and currency, available balance) and fails with the broken rule. Money moves post transactions
(new records, keys from `new_key`) and update the account balances in the client record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolorchestra.envs.toolscale.actions.shared import AMOUNT_SCHEMA, NOW, existing, money, new_key, positive_amount
from toolorchestra.envs.toolscale.drafts import Draft, Drafter, action, fact_text
from toolorchestra.envs.toolscale.tools import TEXT, ToolFailure, ToolSpec, object_schema, write_spec, writes_on

if TYPE_CHECKING:
    from toolorchestra.envs.toolscale.data import Database, Domain
    from toolorchestra.envs.toolscale.tasks import Generator


# --- checks ----------------------------------------------------------------------------------------
def client(database: Database, client_id: str) -> dict[str, Any]:
    return existing(database, "clients", client_id, "client_id")


def owned_account(database: Database, client_id: str, account_id: str, argument: str) -> dict[str, Any]:
    """An active account of the client (argument names the failing input in the error)."""
    account = (client(database, client_id).get("accounts") or {}).get(account_id)
    if not isinstance(account, dict):
        raise ToolFailure(f"{argument} {account_id!r} is not an account of client {client_id!r}")
    if account.get("status") != "active":
        raise ToolFailure(f"{argument} {account_id!r} is {account.get('status')}; it must be active")
    return account


def owned(database: Database, collection: str, key: str, client_id: str, argument: str) -> dict[str, Any]:
    """A loan or beneficiary (collection) of the client, found by its key."""
    record = existing(database, collection, key, argument)
    if record.get("client_id") != client_id:
        raise ToolFailure(f"{argument} {key!r} does not belong to client {client_id!r}")
    return record


def require_funds(account: dict[str, Any], amount: float) -> None:
    available = float(account["balance"]["available"])
    if amount > available:
        raise ToolFailure(
            f"insufficient available balance in account {account['account_id']!r}: "
            f"available {available}, amount {amount}"
        )


def usable_beneficiary(database: Database, client_id: str, beneficiary_id: str) -> dict[str, Any]:
    beneficiary = owned(database, "beneficiaries", beneficiary_id, client_id, "beneficiary_id")
    if beneficiary.get("status") != "active":
        raise ToolFailure(f"beneficiary {beneficiary_id!r} is {beneficiary.get('status')}; it must be active")
    verification = (beneficiary.get("verification") or {}).get("status")
    if verification != "verified":
        raise ToolFailure(f"beneficiary {beneficiary_id!r} is not verified (verification status {verification})")
    return beneficiary


# --- effects ---------------------------------------------------------------------------------------
def move(database: Database, client_id: str, account: dict[str, Any], delta: float) -> float:
    """Add delta to the account's current and available balances; returns the new current balance."""
    balance = dict(account["balance"])
    balance["current"] = money(float(balance["current"]) + delta)
    balance["available"] = money(float(balance["available"]) + delta)
    database.update("clients", client_id, ["accounts", account["account_id"], "balance"], balance)
    return balance["current"]


def post(
    database: Database,
    client_id: str,
    account: dict[str, Any],
    amount: float,
    kind: str,
    method: str,
    description: str,
    related: str | None = None,
    credit: bool = False,
) -> str:
    """Post a transaction moving amount out of (or into, credit) the account; returns its id."""
    balance_after = move(database, client_id, account, amount if credit else -amount)
    key = new_key(database, "transactions")
    database.create(
        "transactions",
        key,
        {
            "transaction_id": key,
            "client_id": client_id,
            "account_id": account["account_id"],
            "timestamp": NOW,
            "type": kind,
            "direction": "credit" if credit else "debit",
            "amount": amount,
            "currency": account["currency"],
            "description": description,
            "method": method,
            "status": "posted",
            "merchant": None,
            "related_transaction_id": related,
            "exchange": None,
            "fees": [],
            "hold": None,
            "balance_after": balance_after,
        },
    )
    return key


# --- tools -----------------------------------------------------------------------------------------
def transfer_to_beneficiary(database: Database, arguments: dict[str, Any]) -> Any:
    client_id, beneficiary_id = arguments["client_id"], arguments["beneficiary_id"]
    amount = positive_amount(arguments)
    beneficiary = usable_beneficiary(database, client_id, beneficiary_id)
    source = arguments["from_account_id"]
    account = owned_account(database, client_id, source, "from_account_id")
    if source not in (beneficiary.get("allowed_from_account_ids") or []):
        raise ToolFailure(
            f"from_account_id {source!r} is not allowed for beneficiary {beneficiary_id!r} "
            f"(allowed: {', '.join(beneficiary.get('allowed_from_account_ids') or []) or 'none'})"
        )
    limit = float((beneficiary.get("transfer_limits") or {}).get("per_transfer_limit") or 0)
    if amount > limit:
        raise ToolFailure(f"amount {amount} exceeds the per-transfer limit {limit} of beneficiary {beneficiary_id!r}")
    require_funds(account, amount)
    name = (beneficiary.get("name") or {}).get("display_name") or beneficiary_id
    description = arguments.get("description") or f"Transfer to {name}"
    key = post(database, client_id, account, amount, "transfer", arguments.get("method", "ACH"), description)
    return {
        "transaction_id": key,
        "from_account_id": source,
        "beneficiary_id": beneficiary_id,
        "amount": amount,
        "currency": account["currency"],
        "status": "posted",
    }


def internal_transfer(database: Database, arguments: dict[str, Any]) -> Any:
    client_id, source, target = arguments["client_id"], arguments["from_account_id"], arguments["to_account_id"]
    amount = positive_amount(arguments)
    if source == target:
        raise ToolFailure("from_account_id and to_account_id must be different accounts")
    from_account = owned_account(database, client_id, source, "from_account_id")
    to_account = owned_account(database, client_id, target, "to_account_id")
    if from_account.get("type") == "credit":
        raise ToolFailure(f"from_account_id {source!r} is a credit account; no cash advance by transfer")
    if from_account["currency"] != to_account["currency"]:
        raise ToolFailure(
            f"currencies differ ({from_account['currency']} -> {to_account['currency']}); "
            "internal transfers must be in one currency"
        )
    require_funds(from_account, amount)
    description = arguments.get("description") or "Internal transfer"
    debit = post(database, client_id, from_account, amount, "transfer", "Internal", description)
    credit = post(
        database, client_id, to_account, amount, "transfer", "Internal", description, related=debit, credit=True
    )
    database.update("transactions", debit, "related_transaction_id", credit)
    return {
        "debit_transaction_id": debit,
        "credit_transaction_id": credit,
        "amount": amount,
        "currency": from_account["currency"],
        "status": "posted",
    }


def loan_payment(database: Database, arguments: dict[str, Any]) -> Any:
    client_id, loan_id, source = arguments["client_id"], arguments["loan_id"], arguments["from_account_id"]
    amount = positive_amount(arguments)
    loan = owned(database, "loans", loan_id, client_id, "loan_id")
    account = owned_account(database, client_id, source, "from_account_id")
    require_funds(account, amount)
    method, description = arguments.get("method", "Internal"), arguments.get("description") or f"Loan payment {loan_id}"
    key = post(database, client_id, account, amount, "payment", method, description)
    entry = {
        "transaction_id": key,
        "posted_at": NOW,
        "amount": amount,
        "currency": account["currency"],
        "method": method,
        "principal_component": amount,
        "interest_component": 0.0,
        "fees_component": 0.0,
    }
    database.update("loans", loan_id, "repayment_history", [*(loan.get("repayment_history") or []), entry])
    return {
        "transaction_id": key,
        "loan_id": loan_id,
        "amount": amount,
        "currency": account["currency"],
        "status": "posted",
    }


def verify_beneficiary(database: Database, arguments: dict[str, Any]) -> Any:
    client_id, beneficiary_id = arguments["client_id"], arguments["beneficiary_id"]
    beneficiary = owned(database, "beneficiaries", beneficiary_id, client_id, "beneficiary_id")
    old = dict(beneficiary.get("verification") or {})
    if old.get("status") == "verified":
        raise ToolFailure(f"beneficiary {beneficiary_id!r} is already verified")
    verification = {
        **old,
        "status": "verified",
        "method": arguments.get("method") or old.get("method"),
        "verified_at": NOW,
    }
    database.update("beneficiaries", beneficiary_id, "verification", verification)
    return {"beneficiary_id": beneficiary_id, "verification": verification}


def add_beneficiary(database: Database, arguments: dict[str, Any]) -> Any:
    client_id, beneficiary_id = arguments["client_id"], arguments["beneficiary_id"]
    holder = client(database, client_id)
    if database.get("beneficiaries", beneficiary_id) is not None:
        raise ToolFailure(f"beneficiary_id {beneficiary_id!r} already exists")
    foreign = [a for a in arguments["allowed_from_account_ids"] if a not in (holder.get("accounts") or {})]
    if foreign:
        raise ToolFailure(f"allowed_from_account_ids: {foreign[0]!r} is not an account of client {client_id!r}")
    kind = arguments["type"]
    needed = ("first_name", "last_name") if kind == "individual" else ("business_name",)
    missing = [name for name in needed if not arguments.get(name)]
    if missing:
        raise ToolFailure(f"invalid argument {missing[0]}: required for a beneficiary of type {kind!r}")
    per_transfer, daily = positive_amount(arguments, "per_transfer_limit"), positive_amount(arguments, "daily_limit")
    record = {
        "beneficiary_id": beneficiary_id,
        "client_id": client_id,
        "name": {
            "display_name": arguments["display_name"],
            "first_name": arguments.get("first_name"),
            "last_name": arguments.get("last_name"),
            "business_name": arguments.get("business_name"),
        },
        "type": kind,
        "bank_details": {
            "bank_name": arguments["bank_name"],
            "account_number_masked": arguments["account_number_masked"],
            **{k: arguments.get(k) for k in ("routing_number", "iban", "swift_bic")},
        },
        "address": {"address2": "", **arguments["address"]},
        "allowed_from_account_ids": list(arguments["allowed_from_account_ids"]),
        "transfer_limits": {"per_transfer_limit": per_transfer, "daily_limit": daily},
        "verification": {
            "status": "pending",
            "method": arguments.get("verification_method", "document"),
            "verified_at": None,
        },
        "status": "active",
        "created_at": NOW,
        "notes": None,
    }
    database.create("beneficiaries", beneficiary_id, record)
    database.update("clients", client_id, "beneficiary_ids", [*(holder.get("beneficiary_ids") or []), beneficiary_id])
    return {"beneficiary_id": beneficiary_id, "status": "active", "verification_status": "pending"}


ADDRESS = {
    "type": "object",
    "additionalProperties": False,
    "required": ["address1", "city", "state", "zip", "country"],
    "properties": {name: {"type": "string"} for name in ("address1", "address2", "city", "state", "zip", "country")},
}


def specs(domain: Domain) -> list[ToolSpec]:
    description = {"type": "string", "description": "optional; a default text is used when omitted"}
    on_beneficiary = writes_on("beneficiaries", "beneficiary_id", {"client_id": TEXT})
    return [
        on_beneficiary(
            "initiate_transfer_to_beneficiary",
            "Send money from the client's active account to an "
            "owned, active, verified beneficiary, within its per-transfer limit and the available balance.",
            {"from_account_id": TEXT, "beneficiary_id": TEXT, "amount": AMOUNT_SCHEMA},
            transfer_to_beneficiary,
            {"method": {"enum": ["ACH", "Wire"]}, "description": description},
        ),
        write_spec(
            "initiate_internal_transfer",
            "Move money between two active accounts of the same client "
            "(same currency; the source may not be a credit account).",
            object_schema(
                {"client_id": TEXT, "from_account_id": TEXT, "to_account_id": TEXT, "amount": AMOUNT_SCHEMA},
                {"description": description},
            ),
            internal_transfer,
            "clients",
            "client_id",
        ),
        write_spec(
            "make_loan_payment",
            "Pay the client's loan from one of the client's active accounts.",
            object_schema(
                {"client_id": TEXT, "loan_id": TEXT, "from_account_id": TEXT, "amount": AMOUNT_SCHEMA},
                {"method": {"enum": ["Internal", "ACH", "Wire"]}, "description": description},
            ),
            loan_payment,
            "loans",
            "loan_id",
        ),
        on_beneficiary(
            "verify_beneficiary",
            "Mark the client's own beneficiary as verified.",
            {"beneficiary_id": TEXT},
            verify_beneficiary,
            {"method": TEXT},
        ),
        on_beneficiary(
            "add_beneficiary",
            "Create a beneficiary for the client (verification pending).",
            {
                "beneficiary_id": TEXT,
                "type": {"enum": ["individual", "business"]},
                "display_name": TEXT,
                "bank_name": TEXT,
                "account_number_masked": TEXT,
                "address": ADDRESS,
                "allowed_from_account_ids": {"type": "array", "items": TEXT, "minItems": 1},
                "per_transfer_limit": AMOUNT_SCHEMA,
                "daily_limit": AMOUNT_SCHEMA,
            },
            add_beneficiary,
            {
                "first_name": TEXT,
                "last_name": TEXT,
                "business_name": TEXT,
                "routing_number": TEXT,
                "iban": TEXT,
                "swift_bic": TEXT,
                "verification_method": TEXT,
            },
        ),
    ]


# --- tasks -----------------------------------------------------------------------------------------
def round_amount(cap: float, fraction: float) -> float:
    """A round amount near fraction * cap, never above cap and above 0."""
    raw = cap * fraction
    step = 100 if raw >= 1000 else 10 if raw >= 100 else 1
    return float(max(step, int(raw // step) * step)) if cap >= step else money(cap)


def active_accounts(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for a in (record.get("accounts") or {}).values() if a.get("status") == "active"]


class BankDrafter(Drafter):
    """Drafts the action tasks of one authenticated client (gold: authenticate, the reads the policy asks
    for before a write, then the write; refusals stop after the reads, and their write must fail)."""

    def __init__(self, generator: Generator, client_id: str, record: dict[str, Any], email: str) -> None:
        self.gen, self.rng, self.client_id, self.record = generator, generator.rng, client_id, record
        super().__init__(
            f"clients/{client_id}", f"Hi, my email is {email}.", [action("find_client_id_by_email", email=email)]
        )

    def transfer_call(self, account: dict[str, Any], beneficiary_id: str, amount: float, method: str) -> dict[str, Any]:
        return action(
            "initiate_transfer_to_beneficiary",
            client_id=self.client_id,
            from_account_id=account["account_id"],
            beneficiary_id=beneficiary_id,
            amount=amount,
            method=method,
        )

    def beneficiary_tasks(self, beneficiary_id: str, beneficiary: dict[str, Any]) -> list[Draft]:
        accounts = {a["account_id"]: a for a in active_accounts(self.record)}
        allowed = [accounts[a] for a in beneficiary.get("allowed_from_account_ids") or [] if a in accounts]
        if not allowed:
            return []
        account, method = self.rng.choice(allowed), self.rng.choice(["ACH", "Wire"])
        name = (beneficiary.get("name") or {}).get("display_name") or beneficiary_id
        available = float(account["balance"]["available"])
        cap = min(available, float(beneficiary["transfer_limits"]["per_transfer_limit"]))
        reads = [
            action("get_beneficiary", beneficiary_id=beneficiary_id),
            action("get_account", account_id=account["account_id"]),
        ]

        def ask(amount: float) -> str:
            return (
                f"Please send {fact_text(amount)} {account['currency']} from my account "
                f"{account['account_id']} to my beneficiary {name} ({beneficiary_id}) by {method}."
            )

        usable = beneficiary.get("status") == "active" and beneficiary["verification"].get("status") == "verified"
        if not usable:  # suspended, revoked or unverified: the policy forbids any transfer
            amount = round_amount(max(cap, 1.0), 0.2)
            call = self.transfer_call(account, beneficiary_id, amount, method)
            drafts = [self.refuse(ask(amount), reads[:1], call, "beneficiary_id")]
            if beneficiary.get("status") == "active" and beneficiary["verification"].get("status") == "pending":
                verify = action("verify_beneficiary", client_id=self.client_id, beneficiary_id=beneficiary_id)
                drafts.append(
                    self.write(f"Please verify my beneficiary {name} ({beneficiary_id}).", [reads[0], verify])
                )
            return drafts
        drafts = []
        if cap >= 1:
            amount = round_amount(cap, self.rng.choice([0.1, 0.25, 0.5]))
            drafts.append(
                self.write(ask(amount), [*reads, self.transfer_call(account, beneficiary_id, amount, method)])
            )
        over = round_amount(cap * 1.5, 1.0) + 100  # above the limit or the available balance
        call = self.transfer_call(account, beneficiary_id, over, method)
        drafts.append(self.refuse(ask(over), reads, call, "beneficiary_id"))
        return drafts

    def loan_tasks(self, loan_id: str, loan: dict[str, Any]) -> list[Draft]:
        account = (self.record.get("accounts") or {}).get(loan.get("linked_repayment_account_id"))
        if not account or account.get("status") != "active":
            return []
        due = [entry for entry in loan.get("payment_schedule") or [] if entry.get("status") != "paid"]
        amount = float(due[0]["amount"]) if due else round_amount(float(loan["principal"]), 0.02)
        request = (
            f"Please pay {fact_text(amount)} {account['currency']} toward my loan {loan_id} "
            f"from my account {account['account_id']}."
        )
        reads = [action("get_loan", loan_id=loan_id), action("get_account", account_id=account["account_id"])]
        pay = action(
            "make_loan_payment",
            client_id=self.client_id,
            loan_id=loan_id,
            from_account_id=account["account_id"],
            amount=amount,
        )
        return [self.decide(amount <= float(account["balance"]["available"]), request, reads, pay, "loan_id")]

    def internal_tasks(self) -> list[Draft]:
        accounts = active_accounts(self.record)
        pairs = [(a, b) for a in accounts for b in accounts if a is not b and a["currency"] == b["currency"]]
        drafts = []
        for source, target in pairs[:1] if pairs else []:
            amount = round_amount(float(source["balance"]["available"]), self.rng.choice([0.1, 0.2, 0.3]))
            if amount <= 0:
                continue
            call = action(
                "initiate_internal_transfer",
                client_id=self.client_id,
                from_account_id=source["account_id"],
                to_account_id=target["account_id"],
                amount=amount,
            )
            request = (
                f"Please move {fact_text(amount)} {source['currency']} from my account {source['account_id']} "
                f"to my account {target['account_id']}."
            )
            reads = [
                action("get_account", account_id=source["account_id"]),
                action("get_account", account_id=target["account_id"]),
            ]
            if source.get("type") == "credit" or amount > float(source["balance"]["available"]):
                drafts.append(self.draft("action_refusal", request, reads, call))
            else:
                drafts.append(self.write(request, [*reads, call]))
        return drafts

    def add_beneficiary_task(self, template: dict[str, Any]) -> list[Draft]:
        sources = [a for a in active_accounts(self.record) if a.get("type") != "credit"]
        if not sources:
            return []
        new_id = "".join(self.rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789") for _ in range(8))
        if new_id in self.gen.domain.base["beneficiaries"]:
            return []
        name, bank, address = template["name"], template["bank_details"], template["address"]
        limit = float(template["transfer_limits"]["per_transfer_limit"])
        arguments: dict[str, Any] = {
            "client_id": self.client_id,
            "beneficiary_id": new_id,
            "type": template["type"],
            "display_name": name["display_name"],
            "bank_name": bank["bank_name"],
            "account_number_masked": bank["account_number_masked"],
            "address": {k: address[k] for k in ("address1", "city", "state", "zip", "country")},
            "allowed_from_account_ids": [sources[0]["account_id"]],
            "per_transfer_limit": limit,
            "daily_limit": float(template["transfer_limits"]["daily_limit"]),
        }
        who = f"{name['first_name']} {name['last_name']}" if template["type"] == "individual" else name["business_name"]
        if template["type"] == "individual":
            arguments.update(first_name=name["first_name"], last_name=name["last_name"])
        else:
            arguments["business_name"] = name["business_name"]
        place = arguments["address"]
        request = (
            f"Please add a new {template['type']} beneficiary with beneficiary id {new_id}: {who}, display "
            f"name '{name['display_name']}', bank {bank['bank_name']}, account "
            f"{bank['account_number_masked']}, address {place['address1']}, {place['city']}, "
            f"{place['state']} {place['zip']}, {place['country']}; allow transfers from my account "
            f"{sources[0]['account_id']}; per-transfer limit {fact_text(limit)}, "
            f"daily limit {fact_text(arguments['daily_limit'])}. No other details."
        )
        return [self.write(request, [action("add_beneficiary", **arguments)])]


def drafts(generator: Generator) -> list[Draft]:
    """Per authenticated client: transfers to beneficiaries, loan payments, an internal transfer, a
    beneficiary verification and (for a third of the clients) a new beneficiary; refusals where the
    policy forbids the request."""
    base = generator.domain.base
    beneficiaries = list(base["beneficiaries"].values())
    found: list[Draft] = []
    for client_id, record, email in generator.by_email("clients"):
        drafter = BankDrafter(generator, client_id, record, email)
        for key, beneficiary in base["beneficiaries"].items():
            if beneficiary.get("client_id") == client_id:
                found += drafter.beneficiary_tasks(key, beneficiary)
        for key, loan in base["loans"].items():
            if loan.get("client_id") == client_id:
                found += drafter.loan_tasks(key, loan)
        found += drafter.internal_tasks()
        if generator.rng.random() < 1 / 3:
            found += drafter.add_beneficiary_task(generator.rng.choice(beneficiaries))
    return found
