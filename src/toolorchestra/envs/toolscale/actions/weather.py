"""Weather policy actions (weather/policy.md, "Forecast Verification" and the input validation of
"Constraints and Safety") and the tasks that use them.

- verify_forecast_for_date(forecast_id, date, actual_high_c, actual_low_c, actual_precip_mm, status,
  [notes]): the forecast exists (by its key, as get_forecast), the date is a real YYYY-MM-DD date, the
  status one of pending, verified, revised, the amounts finite numbers and the precipitation >= 0; it
  overwrites or adds `verification_by_date[date]` (notes default to "").

Left out: the user-profile writes (add/remove_saved_location, update_alert_preferences,
add/remove_subscription, upgrade_membership): weather's db.json holds only locations, forecasts and
observations, no user records (no user ids, emails or payment methods), so there is nothing for them to
act on; the read tools with time windows (search_forecasts, get_hourly_forecast_window, ...), which the
derived list/find tools partly cover; calculate; the confirmation step. With no users, a task's owner is
its forecast (as for the earlier families) and the gold reads the forecast before verifying it.
"""

from __future__ import annotations

import datetime
import math
from typing import TYPE_CHECKING, Any

from toolorchestra.envs.toolscale.actions.shared import existing
from toolorchestra.envs.toolscale.drafts import Draft, action, fact_text
from toolorchestra.envs.toolscale.tools import ToolFailure, ToolSpec, object_schema, write_spec

if TYPE_CHECKING:
    from toolorchestra.envs.toolscale.data import Database, Domain
    from toolorchestra.envs.toolscale.tasks import Generator

FORECASTS = "forecasts"
STATUSES = ("pending", "verified", "revised")
NUMBER = {"type": "number"}
DATE = {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$", "description": "YYYY-MM-DD"}
WRITE_SHARE = 0.7  # of a forecast's dates, the share asked to be verified
REFUSAL_SHARE = 0.4  # of the forecasts, the share asked for a status the policy does not allow
NOT_STATUSES = ("confirmed", "final", "approved")


def verify_forecast_for_date(database: Database, arguments: dict[str, Any]) -> Any:
    key, date, status = arguments["forecast_id"], arguments["date"], arguments["status"]
    existing(database, FORECASTS, key, "forecast_id")
    try:
        datetime.date.fromisoformat(date)
    except ValueError:
        raise ToolFailure(f"invalid argument date: {date!r} is not a real YYYY-MM-DD date") from None
    if status not in STATUSES:
        raise ToolFailure(
            f"invalid argument status: {status!r}; the verification status must be one of {', '.join(STATUSES)}"
        )
    values = {name: arguments[name] for name in ("actual_high_c", "actual_low_c", "actual_precip_mm")}
    bad = next((name for name, value in values.items() if not math.isfinite(value)), None)
    if bad:
        raise ToolFailure(f"invalid argument {bad}: expected a finite number")
    if values["actual_precip_mm"] < 0:
        raise ToolFailure("invalid argument actual_precip_mm: precipitation cannot be negative")
    entry = {
        "status": status,
        **{name: float(value) for name, value in values.items()},
        "notes": arguments.get("notes", ""),
    }
    database.update(FORECASTS, key, ["verification_by_date", date], entry)
    return {"forecast_id": key, "date": date, "verification": entry}


def specs(domain: Domain) -> list[ToolSpec]:
    # status is a plain string here (not an enum) so that a status outside the policy's values fails
    # with the rule's own message
    parameters = object_schema(
        {
            "forecast_id": {"type": "string", "minLength": 1},
            "date": DATE,
            "actual_high_c": NUMBER,
            "actual_low_c": NUMBER,
            "actual_precip_mm": NUMBER,
            "status": {"type": "string", "minLength": 1, "description": "pending, verified or revised"},
        },
        {"notes": {"type": "string"}},
    )
    return [
        write_spec(
            "verify_forecast_for_date",
            "Record (overwrite or add) the verification of a forecast "
            "for one date: actual high/low (C), precipitation (mm), status pending|verified|revised, notes.",
            parameters,
            verify_forecast_for_date,
            FORECASTS,
            "forecast_id",
        )
    ]


def forecast_dates(record: dict[str, Any]) -> list[str]:
    dates = {entry["date"] for entry in record.get("daily") or [] if isinstance(entry.get("date"), str)}
    return sorted(dates | set(record.get("verification_by_date") or {}))


def actuals(generator: Generator, record: dict[str, Any], date: str) -> tuple[float, float, float]:
    """Plausible observed values near the day's forecast (or 20/12 C without one)."""
    day: dict[str, Any] = next((entry for entry in record.get("daily") or [] if entry.get("date") == date), {})
    high = float(day.get("temp_max_c", 20.0)) + generator.rng.choice([-2.0, -1.0, 0.5, 1.0, 2.0])
    low = float(day.get("temp_min_c", 12.0)) + generator.rng.choice([-1.0, -0.5, 0.0, 1.0])
    precip = round(generator.rng.choice([0.0, 0.0, 0.4, 1.2, 3.5, 8.0]), 1)
    return high, min(low, high), precip


def verification(
    generator: Generator, key: str, record: dict[str, Any], date: str, status: str, with_notes: bool
) -> tuple[str, dict[str, Any]]:
    """The request to record plausible actuals for the forecast's date (with notes, drawn after the actuals,
    where with_notes and the draw gives some), and its call."""
    high, low, precip = actuals(generator, record, date)
    notes = generator.rng.choice(["", "Matches station observations.", "Afternoon showers."]) if with_notes else ""
    request = (
        f"Please record the verification of forecast {key} for {date}: actual high {fact_text(high)} C, "
        f"actual low {fact_text(low)} C, precipitation {fact_text(precip)} mm, status '{status}'"
        + (f", notes: {notes}." if notes else ".")
    )
    call = action(
        "verify_forecast_for_date",
        forecast_id=key,
        date=date,
        actual_high_c=high,
        actual_low_c=low,
        actual_precip_mm=precip,
        status=status,
        **({"notes": notes} if notes else {}),
    )
    return request, call


def forecast_tasks(generator: Generator, key: str, record: dict[str, Any]) -> list[Draft]:
    owner, read, found = f"{FORECASTS}/{key}", action("get_forecast", forecast_id=key), []
    done = record.get("verification_by_date") or {}
    for date in forecast_dates(record):
        if generator.rng.random() >= WRITE_SHARE:
            continue
        status = "revised" if (done.get(date) or {}).get("status") == "verified" else "verified"
        request, call = verification(generator, key, record, date, status, with_notes=True)
        found.append(Draft("action_write", owner, request, [read, call]))
    dates = forecast_dates(record)
    if dates and generator.rng.random() < REFUSAL_SHARE:
        date, status = generator.rng.choice(dates), generator.rng.choice(NOT_STATUSES)
        request, call = verification(generator, key, record, date, status, with_notes=False)
        forbid = [{"name": "verify_forecast_for_date", "argument": "forecast_id", "value": key}]
        found.append(Draft("action_refusal", owner, request, [read], refused=[call], forbidden=forbid))
    return found


def drafts(generator: Generator) -> list[Draft]:
    """Per forecast: verifications for most of its dates (a verified date is revised), and for some a
    status outside pending/verified/revised, refused."""
    return [
        draft
        for key, record in generator.domain.base[FORECASTS].items()
        for draft in forecast_tasks(generator, key, record)
    ]
