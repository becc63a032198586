"""E-commerce policy actions (ecommerce/policy.md, "Authentication tools", "Write tools" and "Generic
action rules") and the tasks that use them. Sales keep their state in `state` (not `status`) and the
default address is a nested `location`, so the schema rules derive no write on either.

Read:
- find_account_key_by_name_zip(first_name, last_name, postal_code): the policy's second way to locate an
  account (case-insensitive names, exact postal code); several matches are listed, never one picked.

Writes (every sale action takes the authenticated account_key; the sale must be one of that account's):
- modify_account_address(account_key, line1, line2, municipality, region, nation, postal_code): every
  field but line2 non-empty; replaces the account's default `location`;
- modify_pending_sale_address(account_key, sale_ref, line1, ..., postal_code): only a pending sale; same
  field rules; replaces its `delivery` (the sale stays pending);
- modify_pending_sale_payment(account_key, sale_ref, instrument_id): only a pending sale with exactly one
  payment entry in its ledger; the instrument is a funding source of the account and differs from the
  one paid with; appends a payment of the same value with the new instrument, then a refund entry to the
  original one (the answer gives the refund timing: immediate for a gift card, else 5-7 business days);
- cancel_pending_sale(account_key, sale_ref, reason): only a pending sale; the reason "no longer needed" or
  "ordered by mistake"; state cancelled, the reason kept in `cancel_reason`, one refund entry per
  payment entry to its instrument;
- return_delivered_sale_items(account_key, sale_ref, unit_skus, instrument_id): only a delivered sale; the
  unit_skus (duplicates are quantities) are all in its lines, as many times as listed; the refund goes to
  an instrument paid with on this sale or to a gift card of the account; state return requested, the
  request kept in `return_request` (skus sorted, so the order the user lists them in does not matter);
- exchange_delivered_sale_items(account_key, sale_ref, unit_skus_old, unit_skus_new, instrument_id): only a
  delivered sale; both lists the same length, the old skus in its lines; each new sku an in-stock
  offering of the catalogue group of the line it replaces; the instrument a funding source of the
  account; state exchange requested, the pairs (sorted) and the price difference kept in
  `exchange_request` (the policy settles the difference offline, so no ledger entry).
The state rules make "return or exchange only once" hold: after either the sale is no longer delivered.

Left out: the confirmation step and "one user per conversation" as such (a tool cannot know what was
confirmed or who authenticated; the account_key argument and the ownership check stand in for the
latter), transfer_to_human_agents and the database statistics read; an exchange of a sku for the same
sku (a replacement) is not refused, as the policy does not forbid it. The data have no pending sale (every
sale is shipped, fulfilled, delivered, completed or processing), so the pending-sale actions appear in
tasks only as refusals; every account holds a single credit card, so no write task changes a payment
method and no exchange is possible in the data (only one catalogue group has two offerings, and its sale
is shipped). Of the 200 accounts only 19 have an email no other account shares; the tasks authenticate
the others by name + postal code where that is unique (40 more) and leave out the rest (ambiguous).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from toolorchestra.envs.toolscale.actions.shared import address_of, existing, money, pick_entries
from toolorchestra.envs.toolscale.drafts import Draft, Drafter, action
from toolorchestra.envs.toolscale.tools import TEXT, ToolFailure, ToolSpec, object_schema, write_spec, writes_on

if TYPE_CHECKING:
    from toolorchestra.envs.toolscale.data import Database, Domain
    from toolorchestra.envs.toolscale.tasks import Generator

ACCOUNTS, SALES, CATALOGUE = "accounts", "sales", "catalogue"
SKUS = {"type": "array", "minItems": 1, "items": TEXT, "description": "unit_skus; repeat one for each unit"}
ADDRESS_FIELDS = ("line1", "line2", "municipality", "region", "nation", "postal_code")
OPTIONAL_ADDRESS_FIELDS = ("line2",)  # an address may have no second line
CANCEL_REASONS = ("no longer needed", "ordered by mistake")
GIFT_CARD = "gift_card"
IMMEDIATE, LATER = "immediate", "5-7 business days"
ADDRESSES = (  # (line1, municipality, region, nation, postal_code) for the address changes the tasks ask for
    ("18 Juniper Lane", "Austin", "TX", "USA", "78701"),
    ("401 Harbor Drive", "Seattle", "WA", "USA", "98101"),
    ("77 Chestnut Street", "Boston", "MA", "USA", "02108"),
    ("2300 Lakeview Avenue", "Chicago", "IL", "USA", "60614"),
    ("9 Orchard Road", "Denver", "CO", "USA", "80202"),
    ("1550 Peachtree Street", "Atlanta", "GA", "USA", "30309"),
    ("640 Sunset Boulevard", "Los Angeles", "CA", "USA", "90028"),
    ("12 Willow Court", "Madison", "WI", "USA", "53703"),
)
APARTMENTS = ("Apt 2A", "Apt 7C", "Unit 14", "Suite 300", "Apt 11F", "")
ADDRESS_TASK_SHARE = 0.5  # of the accounts, the share also asking for a second-line (apartment) correction
SALE_REFUSALS_PER_SALE = 2  # requests the policy forbids for a sale that is neither pending nor delivered
FOREIGN_SHARE = 0.4  # of the accounts, the share asking to act on another account's sale


# --- lookups ---------------------------------------------------------------------------------------
def account(database: Database, account_key: str) -> dict[str, Any]:
    return existing(database, ACCOUNTS, account_key, "account_key", "account")


def owned_sale(database: Database, arguments: dict[str, Any]) -> dict[str, Any]:
    """The sale, which must belong to the (existing) account the call names."""
    account_key, sale_ref = arguments["account_key"], arguments["sale_ref"]
    account(database, account_key)
    record = existing(database, SALES, sale_ref, "sale_ref")
    if record.get("account_key") != account_key:
        raise ToolFailure(
            f"sale {sale_ref!r} is not a sale of account {account_key!r}; act only on the "
            "authenticated user's own sales"
        )
    return record


def require_state(record: dict[str, Any], wanted: str, doing: str) -> None:
    if record.get("state") != wanted:
        raise ToolFailure(f"sale {record['sale_ref']!r} is {record.get('state')}; only {wanted} sales allow {doing}")


def funding_source(database: Database, account_key: str, instrument_id: str) -> dict[str, Any]:
    source = (account(database, account_key).get("funding_sources") or {}).get(instrument_id)
    if not isinstance(source, dict):
        raise ToolFailure(f"instrument_id {instrument_id!r} is not a funding source of account {account_key!r}")
    return source


def identity(record: dict[str, Any]) -> tuple[str, str, str]:
    """What find_account_key_by_name_zip matches on: first and last name (any case) and postal code."""
    person, location = record.get("person") or {}, record.get("location") or {}
    return (
        str(person.get("given", "")).lower(),
        str(person.get("family", "")).lower(),
        str(location.get("postal_code", "")),
    )


def refund_timing(database: Database, account_key: str, instrument_id: str | None) -> str:
    """Immediate to a gift card, else 5-7 business days (an instrument no longer on file counts as other)."""
    source = (account(database, account_key).get("funding_sources") or {}).get(instrument_id) or {}
    return IMMEDIATE if source.get("origin") == GIFT_CARD else LATER


def sale_lines(record: dict[str, Any], skus: list[str], argument: str) -> list[dict[str, Any]]:
    """One line of the sale per listed sku (duplicates are quantities): all must be in the sale."""
    lines, sale = record.get("lines") or [], f"sale {record['sale_ref']!r}"
    picked = pick_entries(lines, "unit_sku", skus, argument, sale, "the items must exist in the sale")
    return [lines[index] for index in picked]


def payments(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [entry for entry in record.get("ledger") or [] if entry.get("entry_kind") == "payment"]


def refund_entry(entry: dict[str, Any]) -> dict[str, Any]:
    return {"entry_kind": "refund", "value": entry.get("value"), "instrument_id": entry.get("instrument_id")}


# --- tools -----------------------------------------------------------------------------------------
def find_by_name_zip(database: Database, arguments: dict[str, Any]) -> Any:
    postal_code = arguments["postal_code"].strip()
    wanted = (arguments["first_name"].strip().lower(), arguments["last_name"].strip().lower(), postal_code)
    keys = [key for key, record in database.records(ACCOUNTS) if identity(record) == wanted]
    if not keys:
        raise ToolFailure(
            f"no account with name {arguments['first_name']} {arguments['last_name']} and postal_code {postal_code!r}"
        )
    if len(keys) > 1:  # as find_account_id_by_email: say so rather than pick one silently
        return {"account_keys": keys, "note": "several accounts match this name and postal code"}
    return {"account_key": keys[0]}


def modify_account_address(database: Database, arguments: dict[str, Any]) -> Any:
    account_key = arguments["account_key"]
    old = account(database, account_key).get("location")
    location = address_of(arguments, ADDRESS_FIELDS, OPTIONAL_ADDRESS_FIELDS)
    database.update(ACCOUNTS, account_key, "location", location)
    return {"account_key": account_key, "old_location": old, "location": location}


def modify_sale_address(database: Database, arguments: dict[str, Any]) -> Any:
    record = owned_sale(database, arguments)
    require_state(record, "pending", "a delivery address change")
    delivery = address_of(arguments, ADDRESS_FIELDS, OPTIONAL_ADDRESS_FIELDS)
    database.update(SALES, record["sale_ref"], "delivery", delivery)
    return {"sale_ref": record["sale_ref"], "state": "pending", "delivery": delivery}


def modify_sale_payment(database: Database, arguments: dict[str, Any]) -> Any:
    record = owned_sale(database, arguments)
    require_state(record, "pending", "a payment method change")
    paid = payments(record)
    if len(paid) != 1:
        raise ToolFailure(
            f"sale {record['sale_ref']!r} has {len(paid)} payment entries; a payment method change needs exactly one"
        )
    new_id, old = arguments["instrument_id"], paid[0]
    source = funding_source(database, arguments["account_key"], new_id)
    if new_id == old.get("instrument_id"):
        raise ToolFailure(
            f"instrument_id {new_id!r} already pays for sale {record['sale_ref']!r}; the new instrument "
            "must be different from the current one"
        )
    payment = {"entry_kind": "payment", "value": old.get("value"), "instrument_id": new_id}
    refund = refund_entry(old)
    database.update(SALES, record["sale_ref"], "ledger", [*(record.get("ledger") or []), payment, refund])
    return {
        "sale_ref": record["sale_ref"],
        "payment": payment,
        "new_instrument_origin": source.get("origin"),
        "refund": refund,
        "refund_timing": refund_timing(database, arguments["account_key"], old.get("instrument_id")),
    }


def cancel_sale(database: Database, arguments: dict[str, Any]) -> Any:
    record = owned_sale(database, arguments)
    require_state(record, "pending", "cancellation")
    reason = arguments["reason"].strip().lower()
    if reason not in CANCEL_REASONS:
        raise ToolFailure(
            f"invalid argument reason: {arguments['reason']!r}; the reason must be one of "
            f"{' or '.join(repr(r) for r in CANCEL_REASONS)}"
        )
    refunds = [refund_entry(entry) for entry in payments(record)]
    ref = record["sale_ref"]
    database.update(SALES, ref, "ledger", [*(record.get("ledger") or []), *refunds])
    database.update(SALES, ref, "cancel_reason", reason)
    database.update(SALES, ref, "state", "cancelled")
    timing = {
        entry["instrument_id"]: refund_timing(database, arguments["account_key"], entry["instrument_id"])
        for entry in refunds
    }
    return {"sale_ref": ref, "state": "cancelled", "reason": reason, "refunds": refunds, "refund_timing": timing}


def return_items(database: Database, arguments: dict[str, Any]) -> Any:
    record = owned_sale(database, arguments)
    require_state(record, "delivered", "a return")
    lines = sale_lines(record, arguments["unit_skus"], "unit_skus")
    instrument_id = arguments["instrument_id"]
    original = {entry.get("instrument_id") for entry in payments(record)}
    sources = account(database, arguments["account_key"]).get("funding_sources") or {}
    gift_card = (sources.get(instrument_id) or {}).get("origin") == GIFT_CARD
    if instrument_id not in original and not gift_card:
        raise ToolFailure(
            f"instrument_id {instrument_id!r} can not receive this refund: it must be the sale's "
            "original payment instrument or a gift card on the account"
        )
    request = {
        "unit_skus": sorted(arguments["unit_skus"]),
        "instrument_id": instrument_id,
        "refund_value": money(sum(float(line.get("unit_price") or 0) for line in lines)),
    }
    database.update(SALES, record["sale_ref"], "return_request", request)
    database.update(SALES, record["sale_ref"], "state", "return requested")
    return {
        "sale_ref": record["sale_ref"],
        "state": "return requested",
        "return_request": request,
        "note": "the user will receive an email with return instructions",
    }


def exchange_items(database: Database, arguments: dict[str, Any]) -> Any:
    record = owned_sale(database, arguments)
    require_state(record, "delivered", "an exchange")
    old_skus, new_skus = arguments["unit_skus_old"], arguments["unit_skus_new"]
    if len(old_skus) != len(new_skus):
        raise ToolFailure(
            f"unit_skus_old has {len(old_skus)} items and unit_skus_new {len(new_skus)}; they must be "
            "the same length, aligned by position"
        )
    lines = sale_lines(record, old_skus, "unit_skus_old")
    new_prices = []
    for line, new_sku in zip(lines, new_skus, strict=True):
        group = database.get(CATALOGUE, str(line.get("catalog_ref"))) or {}
        offering = (group.get("offerings") or {}).get(new_sku)
        if not isinstance(offering, dict):
            raise ToolFailure(
                f"unit_sku {new_sku!r} is not an offering of catalogue group {line.get('catalog_ref')!r} "
                f"of the item {line.get('unit_sku')!r} it replaces; an exchange stays in the same group"
            )
        if not offering.get("in_stock"):
            raise ToolFailure(f"unit_sku {new_sku!r} is out of stock; every new item must be in stock")
        new_prices.append(float(offering.get("unit_price") or 0))
    funding_source(database, arguments["account_key"], arguments["instrument_id"])
    difference = money(sum(new_prices) - sum(float(line.get("unit_price") or 0) for line in lines))
    pairs = sorted(
        ({"old": old, "new": new} for old, new in zip(old_skus, new_skus, strict=True)),
        key=lambda pair: (pair["old"], pair["new"]),
    )
    request = {"pairs": pairs, "instrument_id": arguments["instrument_id"], "price_difference": difference}
    database.update(SALES, record["sale_ref"], "exchange_request", request)
    database.update(SALES, record["sale_ref"], "state", "exchange requested")
    return {
        "sale_ref": record["sale_ref"],
        "state": "exchange requested",
        "exchange_request": request,
        "note": "the price difference is processed offline; no new order is needed",
    }


def specs(domain: Domain) -> list[ToolSpec]:
    address = {name: ({"type": "string"} if name in OPTIONAL_ADDRESS_FIELDS else TEXT) for name in ADDRESS_FIELDS}
    write = writes_on(SALES, "sale_ref", {"account_key": TEXT, "sale_ref": TEXT})
    return [
        ToolSpec(
            "find_account_key_by_name_zip",
            "Find the account_key by first name, last name and postal code "
            "(authentication when the email is unknown or fails).",
            object_schema({"first_name": TEXT, "last_name": TEXT, "postal_code": TEXT}),
            find_by_name_zip,
            collection=ACCOUNTS,
        ),
        write_spec(
            "modify_account_address",
            "Replace the account's default address (line2 may be empty).",
            object_schema({"account_key": TEXT, **address}),
            modify_account_address,
            ACCOUNTS,
            "account_key",
        ),
        write(
            "modify_pending_sale_address",
            "Replace the delivery address of the account's pending sale.",
            address,
            modify_sale_address,
        ),
        write(
            "modify_pending_sale_payment",
            "Pay the account's pending sale (exactly one payment entry) with "
            "another funding source of the account; the original instrument is refunded.",
            {"instrument_id": TEXT},
            modify_sale_payment,
        ),
        write(
            "cancel_pending_sale",
            "Cancel the account's pending sale; reason 'no longer needed' or 'ordered by "
            "mistake'; every payment is refunded to its instrument.",
            {"reason": {"type": "string", "minLength": 1, "description": "'no longer needed' or 'ordered by mistake'"}},
            cancel_sale,
        ),
        write(
            "return_delivered_sale_items",
            "Request a return of items of the account's delivered sale (list "
            "every unit, duplicates for quantities), refunded to the original payment instrument or a gift card "
            "of the account. Only once per sale.",
            {"unit_skus": SKUS, "instrument_id": TEXT},
            return_items,
        ),
        write(
            "exchange_delivered_sale_items",
            "Request an exchange of items of the account's delivered sale for "
            "in-stock offerings of the same catalogue group (unit_skus_new aligned with unit_skus_old); "
            "instrument_id: a funding source of the account for the price difference. Only once per sale.",
            {"unit_skus_old": SKUS, "unit_skus_new": SKUS, "instrument_id": TEXT},
            exchange_items,
        ),
    ]


# --- tasks -----------------------------------------------------------------------------------------
def address_text(address: dict[str, str]) -> str:
    parts = ("line1", "line2", "municipality", "region", "postal_code", "nation")
    return ", ".join(address[part] for part in parts if address[part])


class EcommerceDrafter(Drafter):
    """Drafts for one account that can be authenticated unambiguously: by its email when no other account
    shares it, else by name + postal code when those are unique (the policy's second way)."""

    def __init__(
        self, generator: Generator, account_key: str, record: dict[str, Any], auth: dict[str, Any], hello: str
    ) -> None:
        self.gen, self.rng, self.key, self.record = generator, generator.rng, account_key, record
        super().__init__(f"{ACCOUNTS}/{account_key}", hello, [auth])
        self.base = generator.domain.base

    def call(self, name: str, sale_ref: str, **arguments: Any) -> dict[str, Any]:
        return action(name, account_key=self.key, sale_ref=sale_ref, **arguments)

    def named(self, instrument_id: str) -> str:
        """How the user names an instrument: by its origin where it is one of theirs (gift card, paypal
        account, credit card), else by its id alone."""
        origin = ((self.record.get("funding_sources") or {}).get(instrument_id) or {}).get("origin")
        return f"my {origin.replace('_', ' ')} {instrument_id}" if origin else instrument_id

    def new_address(self, current: dict[str, Any]) -> dict[str, str]:
        line1, *rest = self.rng.choice([a for a in ADDRESSES if a[0] != current.get("line1")])
        rest_fields = dict(zip(ADDRESS_FIELDS[2:], rest, strict=True))  # ADDRESSES: all fields but line2, in order
        return {"line1": line1, "line2": self.rng.choice(APARTMENTS), **rest_fields}

    # default address ---------------------------------------------------------------------------
    def address_tasks(self) -> list[Draft]:
        """A move to a new default address and, for some, a correction of the second line only."""
        current = dict(self.record.get("location") or {})
        new = self.new_address(current)
        drafts = [
            self.write(
                f"I have moved. Please change my default address to {address_text(new)}"
                + ("" if new["line2"] else " (no second address line)")
                + ".",
                [action("modify_account_address", account_key=self.key, **new)],
            )
        ]
        if self.rng.random() < ADDRESS_TASK_SHARE and all(isinstance(current.get(f), str) for f in ADDRESS_FIELDS):
            line2 = self.rng.choice([a for a in APARTMENTS if a and a != current.get("line2")])
            fixed = {**{name: current[name] for name in ADDRESS_FIELDS}, "line2": line2}
            drafts.append(
                self.write(
                    f"The second line of my default address is wrong: it should be "
                    f"'{line2}'; the rest stays ({address_text(fixed)}).",
                    [action("modify_account_address", account_key=self.key, **fixed)],
                )
            )
        return drafts

    # sales -------------------------------------------------------------------------------------
    def sale_tasks(self, sale_ref: str, sale: dict[str, Any]) -> list[Draft]:
        if sale.get("state") == "delivered":
            return self.delivered_tasks(sale_ref, sale)
        requests = [
            self.cancel_request,
            self.delivery_request,
            self.payment_request,
            self.return_request,
            self.exchange_request,
        ]
        chosen = self.rng.sample(requests, SALE_REFUSALS_PER_SALE)
        # all of them need a pending (cancel, delivery, payment) or a delivered sale (return, exchange)
        return [self.refusal(sale_ref, *make(sale_ref, sale)) for make in chosen]

    def refusal(self, sale_ref: str, request: str, call: dict[str, Any]) -> Draft:
        """A refused sale write; its argument is always sale_ref."""
        return self.refuse(request, [action("get_sale", sale_ref=sale_ref)], call, "sale_ref")

    def cancel_request(self, sale_ref: str, sale: dict[str, Any], whose: str = "my") -> tuple[str, dict[str, Any]]:
        reason = self.rng.choice(CANCEL_REASONS)
        return (
            f"Please cancel {whose} order {sale_ref}; the reason: {reason}.",
            self.call("cancel_pending_sale", sale_ref, reason=reason),
        )

    def delivery_request(self, sale_ref: str, sale: dict[str, Any], whose: str = "my") -> tuple[str, dict[str, Any]]:
        new = self.new_address(sale.get("delivery") or {})
        return (
            f"Please send {whose} order {sale_ref} to {address_text(new)} instead.",
            self.call("modify_pending_sale_address", sale_ref, **new),
        )

    def payment_request(self, sale_ref: str, sale: dict[str, Any], whose: str = "my") -> tuple[str, dict[str, Any]]:
        # every account has one card, the one the sale was paid with: the user names a new gift card
        instrument = f"GC-{self.key}"
        return (
            f"Please pay for {whose} order {sale_ref} with my gift card {instrument} instead of my card.",
            self.call("modify_pending_sale_payment", sale_ref, instrument_id=instrument),
        )

    def return_request(self, sale_ref: str, sale: dict[str, Any], whose: str = "my") -> tuple[str, dict[str, Any]]:
        skus = [line["unit_sku"] for line in sale.get("lines") or []]
        instrument = (payments(sale) or [{}])[0].get("instrument_id") or f"GC-{self.key}"
        request = (
            f"Please return everything in {whose} order {sale_ref} ({', '.join(skus)}), refunded to "
            f"{self.named(instrument)}, which it was paid with."
        )
        return request, self.call("return_delivered_sale_items", sale_ref, unit_skus=skus, instrument_id=instrument)

    def exchange_request(
        self, sale_ref: str, sale: dict[str, Any], whose: str = "my", other_group: bool = False
    ) -> tuple[str, dict[str, Any]]:
        """An exchange for another offering of the line's group or, where it has none (or other_group), for an
        in-stock offering of another group."""
        line = self.rng.choice(sale.get("lines") or [{}])
        group = self.base[CATALOGUE].get(line.get("catalog_ref"), {})
        others = [sku for sku in group.get("offerings") or {} if sku != line.get("unit_sku")]
        if other_group or not others:
            others = [
                sku
                for ref, g in self.base[CATALOGUE].items()
                if ref != line.get("catalog_ref")
                for sku, offering in (g.get("offerings") or {}).items()
                if offering.get("in_stock")
            ]
        new = self.rng.choice(others)
        instrument = (payments(sale) or [{}])[0].get("instrument_id") or f"GC-{self.key}"
        return self.exchange(sale_ref, line.get("unit_sku"), new, instrument, whose)

    def exchange(
        self, sale_ref: str, sku: Any, new: str, instrument: str, whose: str = "my"
    ) -> tuple[str, dict[str, Any]]:
        """The request to exchange one unit of `sku` for `new`, and its call."""
        request = (
            f"Please exchange the item {sku} of {whose} order {sale_ref} for {new}; use "
            f"{self.named(instrument)} for any difference."
        )
        call = self.call(
            "exchange_delivered_sale_items",
            sale_ref,
            unit_skus_old=[sku],
            unit_skus_new=[new],
            instrument_id=instrument,
        )
        return request, call

    def delivered_tasks(self, sale_ref: str, sale: dict[str, Any]) -> list[Draft]:
        """A return of everything (a write), an exchange within the group where one exists (a write), a
        return of more units than bought, an exchange for another group's item and a cancellation (refusals)."""
        read = action("get_sale", sale_ref=sale_ref)
        request, call = self.return_request(sale_ref, sale)
        drafts = [self.write(request, [read, call])]
        swappable = [
            (line, sku)
            for line in sale.get("lines") or []
            for sku, offering in (self.base[CATALOGUE].get(line.get("catalog_ref"), {}).get("offerings") or {}).items()
            if sku != line.get("unit_sku") and offering.get("in_stock")
        ]
        if swappable:
            line, new = self.rng.choice(swappable)
            instrument = next(iter(self.record.get("funding_sources") or {}))
            asked, swap = self.exchange(sale_ref, line["unit_sku"], new, instrument)
            drafts.append(self.write(asked, [read, swap]))
        sku = self.rng.choice(sale.get("lines") or [{}]).get("unit_sku")
        held = sum(line.get("unit_sku") == sku for line in sale.get("lines") or [])
        too_many = [sku] * (held + 1)
        instrument = call["arguments"]["instrument_id"]
        drafts.append(
            self.refusal(
                sale_ref,
                f"Please return {held + 1} units of {sku} from my order {sale_ref}, "
                f"refunded to {self.named(instrument)}.",
                self.call("return_delivered_sale_items", sale_ref, unit_skus=too_many, instrument_id=instrument),
            )
        )
        drafts.append(self.refusal(sale_ref, *self.exchange_request(sale_ref, sale, other_group=True)))
        drafts.append(self.refusal(sale_ref, *self.cancel_request(sale_ref, sale)))
        return drafts

    def foreign_task(self, sale_ref: str, sale: dict[str, Any]) -> list[Draft]:
        """Another account's sale: not this user's to cancel or return."""
        make = self.return_request if sale.get("state") == "delivered" else self.cancel_request
        return [self.refusal(sale_ref, *make(sale_ref, sale, "my friend's"))]


def authentications(generator: Generator) -> dict[str, tuple[dict[str, Any], str]]:
    """Per account that can be told apart: its authentication call and the words that give it."""
    accounts, found = generator.domain.base[ACCOUNTS], {}
    names = Counter(map(identity, accounts.values()))
    for key, record in accounts.items():
        email = generator.unique_email(generator.shapes[ACCOUNTS], key)
        if email:
            found[key] = (action("find_account_id_by_email", email=email), f"Hi, my email is {email}.")
        elif names[identity(record)] == 1:
            given, family = record["person"]["given"], record["person"]["family"]
            postal_code = record["location"]["postal_code"]
            hello = f"Hi, I don't remember the email on my account; I'm {given} {family}, postal code {postal_code}."
            found[key] = (
                action("find_account_key_by_name_zip", first_name=given, last_name=family, postal_code=postal_code),
                hello,
            )
    return found


def drafts(generator: Generator) -> list[Draft]:
    """Per authenticable account: a move of the default address (for some also a second-line fix); per
    sale, a return and an exchange where allowed (delivered) and requests the policy forbids (refused);
    for some, a request about another account's sale (refused)."""
    base, found = generator.domain.base, []
    sales = list(base[SALES].items())
    for key, (auth, hello) in authentications(generator).items():
        record = base[ACCOUNTS][key]
        drafter = EcommerceDrafter(generator, key, record, auth, hello)
        found += drafter.address_tasks()
        for sale_ref, sale in sales:
            if sale.get("account_key") == key:
                found += drafter.sale_tasks(sale_ref, sale)
        others = [(ref, sale) for ref, sale in sales if sale.get("account_key") != key]
        if others and generator.rng.random() < FOREIGN_SHARE:
            found += drafter.foreign_task(*generator.rng.choice(others))
    return found
