"""Basketball policy actions (basketball/policy.md, "Write actions and rules") and the tasks that use them.

- modify_player_address(player_id, street, city, state, country, zip): all five fields, non-empty;
  replaces the player's address and returns the updated player;
- update_game_status(game_id, new_status): only the policy's transitions (scheduled -> in_progress or
  postponed, postponed -> scheduled, in_progress -> final, nothing after final);
- record_scoring_event(game_id, event_type, points, club_id, player_id, timestamp): only in an
  in_progress game, points matching the event type (2PT=2, 3PT=3, FT=1), the club the game's home or
  away club, an existing player; appends the event to scoring_history and adds the points to the club's
  score (the box score and periods are left as they are: the policy names only those two effects).

Left out: "only for the authenticated player" cannot be checked by a tool (it does not know who
authenticated), so there is no action_refusal for another player's address; authentication by name +
ZIP (no find_player_id_by_name tool is derived; the tasks authenticate by email); the confirmation step.
The derived set_game_status stays (it ignores the transitions); refusals forbid it as well.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolorchestra.envs.toolscale.actions.shared import existing
from toolorchestra.envs.toolscale.drafts import Draft, Drafter, action
from toolorchestra.envs.toolscale.tools import TEXT, ToolFailure, ToolSpec, object_schema, write_spec

if TYPE_CHECKING:
    from toolorchestra.envs.toolscale.data import Database, Domain
    from toolorchestra.envs.toolscale.tasks import Generator

GAMES, PLAYERS = "games", "players"
TRANSITIONS = {
    "scheduled": ("in_progress", "postponed"),
    "postponed": ("scheduled",),
    "in_progress": ("final",),
    "final": (),
}
STATUSES = tuple(TRANSITIONS)
POINTS = {"2PT": 2, "3PT": 3, "FT": 1}
ADDRESS_FIELDS = ("street", "city", "state", "country", "zip")
FINAL_REFUSAL_SHARE = 0.25  # of the (many) final games, the share asked to change status anyway
NOT_LIVE_SCORING_SHARE = 0.08  # of the games not in progress, the share asked to record a score
ADDRESS_SHARE = 1 / 3  # of the authenticable players, the share asking for a new address


# --- checks ----------------------------------------------------------------------------------------
def game(database: Database, game_id: str) -> dict[str, Any]:
    return existing(database, GAMES, game_id, "game_id")


def player(database: Database, player_id: str) -> dict[str, Any]:
    record = database.get(PLAYERS, player_id)
    if record is None:
        raise ToolFailure(f"no player with player_id {player_id!r}; the player must exist in the database")
    return record


def side_of(record: dict[str, Any], club_id: str) -> str:
    """'home' or 'away': the club must be one of the game's two clubs."""
    for side in ("home", "away"):
        if (record.get("clubs") or {}).get(side, {}).get("club_id") == club_id:
            return side
    raise ToolFailure(f"club_id {club_id!r} is neither the home nor the away club of game {record['game_id']!r}")


# --- tools -----------------------------------------------------------------------------------------
def modify_player_address(database: Database, arguments: dict[str, Any]) -> Any:
    player_id = arguments["player_id"]
    player(database, player_id)
    blank = [name for name in ADDRESS_FIELDS if not arguments[name].strip()]
    if blank:
        raise ToolFailure(
            f"invalid argument {blank[0]}: every address field (street, city, state, country, zip) is required"
        )
    address = {name: arguments[name].strip() for name in ADDRESS_FIELDS}
    return database.update(PLAYERS, player_id, "address", address)


def update_game_status(database: Database, arguments: dict[str, Any]) -> Any:
    game_id, new_status = arguments["game_id"], arguments["new_status"]
    current = game(database, game_id).get("status")
    allowed = TRANSITIONS.get(current or "", ())
    if new_status not in allowed:
        after = " or ".join(allowed) if allowed else "no further status (final is terminal)"
        raise ToolFailure(
            f"invalid transition {current} -> {new_status} for game {game_id!r}: "
            f"a {current} game may only move to {after}"
        )
    database.update(GAMES, game_id, "status", new_status)
    return {"game_id": game_id, "old_status": current, "status": new_status}


def record_scoring_event(database: Database, arguments: dict[str, Any]) -> Any:
    game_id, kind, points = arguments["game_id"], arguments["event_type"], arguments["points"]
    record = game(database, game_id)
    if record.get("status") != "in_progress":
        raise ToolFailure(f"game {game_id!r} is {record.get('status')}; scoring events only for in_progress games")
    if POINTS[kind] != points:
        raise ToolFailure(f"points {points} do not match event_type {kind} (2PT=2, 3PT=3, FT=1)")
    side = side_of(record, arguments["club_id"])
    player(database, arguments["player_id"])
    event = {
        "event_type": kind,
        "points": points,
        "club_id": arguments["club_id"],
        "player_id": arguments["player_id"],
        "timestamp": arguments["timestamp"],
    }
    database.update(GAMES, game_id, "scoring_history", [*(record.get("scoring_history") or []), event])
    score = int(record["clubs"][side].get("score") or 0) + points
    database.update(GAMES, game_id, ["clubs", side, "score"], score)
    return {"game_id": game_id, "event": event, "club_side": side, "score": score}


def specs(domain: Domain) -> list[ToolSpec]:
    address = {name: TEXT for name in ADDRESS_FIELDS}
    return [
        write_spec(
            "modify_player_address",
            "Replace the authenticated player's address (street, city, state, "
            "country, zip); returns the updated player.",
            object_schema({"player_id": TEXT, **address}),
            modify_player_address,
            PLAYERS,
            "player_id",
        ),
        write_spec(
            "update_game_status",
            "Move a game to a new status along the allowed transitions: "
            "scheduled -> in_progress|postponed, postponed -> scheduled, in_progress -> final.",
            object_schema({"game_id": TEXT, "new_status": {"type": "string", "enum": list(STATUSES)}}),
            update_game_status,
            GAMES,
            "game_id",
        ),
        write_spec(
            "record_scoring_event",
            "Record a scoring event in an in_progress game (2PT=2, 3PT=3, FT=1 "
            "points) for its home or away club; appends it to scoring_history and updates the team score.",
            object_schema(
                {
                    "game_id": TEXT,
                    "event_type": {"type": "string", "enum": list(POINTS)},
                    "points": {"type": "integer", "enum": sorted(set(POINTS.values()))},
                    "club_id": TEXT,
                    "player_id": TEXT,
                    "timestamp": TEXT,
                }
            ),
            record_scoring_event,
            GAMES,
            "game_id",
        ),
    ]


# --- tasks -----------------------------------------------------------------------------------------
class BasketballDrafter:
    """Drafts for one domain: every task starts with the requesting player's authentication by email."""

    def __init__(self, generator: Generator) -> None:
        self.gen, self.rng, self.base = generator, generator.rng, generator.domain.base
        self.emails = {key: email for key, _, email in generator.by_email(PLAYERS)}
        self.players_of: dict[str, list[str]] = {}
        for key in self.emails:
            for game_id in self.base[PLAYERS][key].get("games") or []:
                self.players_of.setdefault(game_id, []).append(key)
        self.anyone = sorted(self.emails)

    def player(self, player_id: str) -> Drafter:
        """The drafts of one requesting player."""
        email = self.emails[player_id]
        hello = f"Hi, my email is {email}."
        return Drafter(f"{PLAYERS}/{player_id}", hello, [action("find_player_id_by_email", email=email)])

    def requester(self, game_id: str) -> Drafter:
        """A player of the game who can authenticate, else any such player."""
        return self.player(self.rng.choice(self.players_of.get(game_id) or self.anyone))

    def address_task(self, player_id: str) -> list[Draft]:
        record = self.base[PLAYERS][player_id]
        others = [p["address"] for p in self.base[PLAYERS].values() if p["address"] != record["address"]]
        new = self.rng.choice(others)
        where = ", ".join(new[name] for name in ("street", "city", "state", "zip", "country"))
        call = action("modify_player_address", player_id=player_id, **{name: new[name] for name in ADDRESS_FIELDS})
        return [
            self.player(player_id).write(
                f"I moved; please change my address to {where} "
                f"(street {new['street']}, city {new['city']}, state {new['state']}, zip {new['zip']}, "
                f"country {new['country']}).",
                [action("get_player", player_id=player_id), call],
            )
        ]

    def status_tasks(self, game_id: str, record: dict[str, Any]) -> list[Draft]:
        current = record["status"]
        allowed = TRANSITIONS[current]
        if not allowed and self.rng.random() >= FINAL_REFUSAL_SHARE:
            return []
        read = action("get_game", game_id=game_id)

        def ask(status: str) -> str:
            return f"Please update the status of game {game_id} to '{status}'."

        def call(status: str) -> dict[str, Any]:
            return action("update_game_status", game_id=game_id, new_status=status)

        drafts = []
        if allowed:
            status = self.rng.choice(allowed)
            drafts.append(self.requester(game_id).write(ask(status), [read, call(status)]))
        wrong = self.rng.choice([s for s in STATUSES if s != current and s not in allowed])
        refusal = self.requester(game_id).refuse(ask(wrong), [read], call(wrong), "game_id", also=("set_game_status",))
        drafts.append(refusal)
        return drafts

    def scorer(self, record: dict[str, Any]) -> tuple[str, str] | None:
        """(club_id, player_id) of a box-score player who exists in the database."""
        scorers = [
            (b["club_id"], b["player_id"])
            for b in record.get("box_score") or []
            if b.get("player_id") in self.base[PLAYERS]
        ]
        return self.rng.choice(scorers) if scorers else None

    def scoring_call(self, game_id: str, kind: str, points: int, club_id: str, player_id: str) -> dict[str, Any]:
        timestamp = f"Q{self.rng.randint(1, 4)} {self.rng.randint(0, 11):02d}:{self.rng.randint(0, 59):02d}"
        return action(
            "record_scoring_event",
            game_id=game_id,
            event_type=kind,
            points=points,
            club_id=club_id,
            player_id=player_id,
            timestamp=timestamp,
        )

    def scoring_request(self, call: dict[str, Any]) -> str:
        a = call["arguments"]
        return (
            f"Please record a {a['event_type']} scoring event worth {a['points']} point(s) in game {a['game_id']} "
            f"for club {a['club_id']} by player {a['player_id']} at {a['timestamp']}."
        )

    def scoring_tasks(self, game_id: str, record: dict[str, Any]) -> list[Draft]:
        live = record["status"] == "in_progress"
        if not live and self.rng.random() >= NOT_LIVE_SCORING_SHARE:
            return []
        found = self.scorer(record)
        if not found:
            return []
        club_id, player_id = found
        read = action("get_game", game_id=game_id)
        drafts = []
        if live:
            for _ in range(2):
                kind = self.rng.choice(list(POINTS))
                call = self.scoring_call(game_id, kind, POINTS[kind], *(self.scorer(record) or found))
                drafts.append(self.requester(game_id).write(self.scoring_request(call), [read, call]))
            mismatch = self.scoring_call(game_id, "3PT", 2, club_id, player_id)
            drafts.append(self.requester(game_id).refuse(self.scoring_request(mismatch), [read], mismatch, "game_id"))
            playing = {c.get("club_id") for c in record["clubs"].values()}
            outsider = next((c for c in self.base["clubs"] if c not in playing), None)
            if outsider:
                call = self.scoring_call(game_id, "FT", 1, outsider, player_id)
                drafts.append(self.requester(game_id).refuse(self.scoring_request(call), [read], call, "game_id"))
            return drafts
        kind = self.rng.choice(list(POINTS))
        call = self.scoring_call(game_id, kind, POINTS[kind], club_id, player_id)
        return [self.requester(game_id).refuse(self.scoring_request(call), [read], call, "game_id")]


def drafts(generator: Generator) -> list[Draft]:
    """A new address for a third of the authenticable players; per game a valid status change (refused
    when the transition is not allowed; a quarter of the final games); scoring events in the games in
    progress (refused with mismatched points or a club not playing, and in a few games not in progress)."""
    drafter = BasketballDrafter(generator)
    if not drafter.anyone:
        return []
    found: list[Draft] = []
    for player_id in drafter.anyone:
        if generator.rng.random() < ADDRESS_SHARE:
            found += drafter.address_task(player_id)
    for game_id, record in generator.domain.base[GAMES].items():
        if record.get("status") in TRANSITIONS:
            found += drafter.status_tasks(game_id, record)
            found += drafter.scoring_tasks(game_id, record)
    return found
