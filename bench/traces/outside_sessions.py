"""The outside sessions, one function per framework shape; each writes into a Recorder."""

from __future__ import annotations

from bench.traces.outside_steps import (
    CLAUDE,
    CODE_TOOLS,
    GPT,
    RESEARCH_TOOLS,
    SUPPORT_TOOLS,
    Clock,
    Recorder,
    solo,
    step,
    truncate_old_results,
)
from bench.traces.outside_text import Text, tool_specs
from bench.traces.outside_wire import Agent, Habits


def code_agent(seed: int) -> Recorder:
    """A coding CLI: system as two blocks, an <env> block with the time of each call, tool-call
    arguments replayed from a map in a new key order, metadata.user_id per session."""
    text, rec = Text(seed), Recorder("code_agent")
    clock = Clock(text, 24)
    env = (
        "<env>\nWorking directory: /home/dev/payments\nIs directory a git repo: Yes\n"
        "Platform: linux\nToday's date: {date}\nCurrent time: {iso}\n</env>\n" + text.prose(12)
    )
    user = {"user_id": f"user_{text.hex(64)}_account__session_{text.uuid()}"}
    habits = Habits(clock.header, arg_keys=True, system_blocks=True, metadata=user)
    agent = Agent(
        "anthropic", CLAUDE, [text.prose(110), env], tool_specs(text, CODE_TOOLS, 9), habits, seed
    )
    agent.say("The refund job double-charges when a retry lands twice. " + text.prose(8))
    solo(rec, "code_agent", "alpha", "anthropic", agent, text, 24, stream=True, tools=CODE_TOOLS)
    return rec


def research_graph(seed: int) -> Recorder:
    """A graph framework on the OpenAI wire: clock time and request id at the head of the
    system prompt, the tool list rebuilt from a set (a new order every call), arguments and
    schemas re-serialised."""
    text, rec = Text(seed), Recorder("research_graph")
    clock = Clock(text, 20)
    head = "Current time: {clock}. Request id: {rid}.\nYou are a research assistant. "
    habits = Habits(clock.header, tool_order=lambda t: t + 1, arg_keys=True, schema_keys=True)
    specs = tool_specs(text, RESEARCH_TOOLS, 7)
    agent = Agent("openai", GPT, [head + text.prose(90)], specs, habits, seed)
    agent.say("Compare the retry policies of our three payment providers. " + text.prose(5))
    solo(rec, "research_graph", "alpha", "openai", agent, text, 20, tools=RESEARCH_TOOLS)
    return rec


def support_translated(seed: int) -> Recorder:
    """An agents SDK on the OpenAI wire to a Claude model: date-time and trace id in the
    system prompt, the MCP server reconnects at call 8 and lists its tools in a new order."""
    text, rec = Text(seed), Recorder("support_translated")
    clock = Clock(text, 18)
    head = "Current date: {stamp}\nTrace: {trace}\n\n"
    habits = Habits(clock.header, tool_order=lambda t: 0 if t < 8 else 8)
    specs = tool_specs(text, SUPPORT_TOOLS, 10)
    agent = Agent("openai", CLAUDE, [head + text.prose(100)], specs, habits, seed)
    agent.say("Order 88412 arrived broken, I want my money back. " + text.prose(3))
    solo(rec, "support_translated", "beta", "translated", agent, text, 18, tools=SUPPORT_TOOLS)
    return rec


def react_clock(seed: int) -> Recorder:
    """ReAct in plain text on the OpenAI wire, the time of day in the prompt."""
    text, rec = Text(seed), Recorder("react_clock")
    clock = Clock(text, 16)
    rules = "Answer with Thought, Action and Observation lines. It is {clock12} right now.\n"
    habits = Habits(clock.header, system_role="developer")
    agent = Agent("openai", GPT, [rules + text.prose(120)], [], habits, seed)
    agent.say("Question: which replica served the slow refunds last night? " + text.prose(4))
    solo(rec, "react_clock", "beta", "openai", agent, text, 16)
    return rec


def long_edit(seed: int) -> Recorder:
    """A long coding session whose framework cuts old tool outputs at calls 12 and 22;
    schemas re-serialised in a new key order on every call."""
    text, rec = Text(seed), Recorder("long_edit")
    clock = Clock(text, 26)
    habits = Habits(clock.header, schema_keys=True)
    rules = "Current date: {long_date}\n" + text.prose(80)
    agent = Agent("anthropic", CLAUDE, [rules], tool_specs(text, CODE_TOOLS[:5], 8), habits, seed)
    agent.say("Port the ledger writer to the new schema. " + text.prose(6))
    edits = {12: lambda a: truncate_old_results(a, 6), 22: lambda a: truncate_old_results(a, 6)}
    solo(rec, "long_edit", "alpha", "anthropic", agent, text, 26, edits=edits, tools=CODE_TOOLS)
    return rec


def fanout(seed: int, route: str, tenant: str, num_workers: int) -> Recorder:
    """An orchestrator that starts `num_workers` sub-agents at once on one long briefing (its
    head carries the time of each round), three rounds of theirs, then the orchestrator again."""
    name = f"fanout_{route}"
    text, rec = Text(seed), Recorder(name)
    wire, model = ("anthropic", CLAUDE) if route == "anthropic" else ("openai", GPT)
    clock = Clock(text, 12)
    boss = Agent(wire, model, ["Current time: {iso}\n" + text.prose(70)],
                 tool_specs(text, RESEARCH_TOOLS, 6), Habits(clock.header), seed)  # fmt: skip
    boss.say("Audit every payment provider integration. " + text.prose(4))
    briefing = ["You are one of several auditors. Started: {iso}\n" + text.prose(260)]
    specs = tool_specs(text, CODE_TOOLS[:4], 6)
    workers = [
        Agent(wire, model, briefing, specs, Habits(clock.header), seed * 31 + k)
        for k in range(num_workers)
    ]
    for k, worker in enumerate(workers):
        worker.say(f"Audit provider {k + 1} of {num_workers}. " + text.prose(3))
    for rnd in range(9):  # rounds 3-5: the sub-agents' calls of a round go out together
        for agent in workers if 3 <= rnd < 6 else [boss]:
            rec.call(name, tenant, route, agent, rnd, rnd, True)
        for agent in workers if 3 <= rnd < 6 else [boss]:
            step(agent, text, rnd, CODE_TOOLS[:4] if agent is not boss else RESEARCH_TOOLS)
    return rec


def twins(seed: int, route: str, num_calls: int) -> Recorder:
    """Two tenants running the same product template with byte-identical prompts, call by call
    in turn: a session id and the time of each call in the system prompt."""
    group = f"twins_{route}"
    rec = Recorder(group)
    for k, tenant in enumerate(("alpha", "beta")):
        text = Text(seed)  # the same stream: the same bytes for both tenants
        clock = Clock(text, num_calls)
        wire, model = (
            ("anthropic", CLAUDE)
            if route == "anthropic"
            else ("openai", GPT if route == "openai" else CLAUDE)
        )
        head = "Session {sid}. Current time: {iso}.\nYou are Acme Helpdesk's assistant. "
        header = lambda t, c=clock, s=clock.ids[0]: {**c.header(t), "sid": s}  # noqa: E731
        agent = Agent(wire, model, [head + text.prose(90)], tool_specs(text, SUPPORT_TOOLS, 8),
                      Habits(header), seed)  # fmt: skip
        agent.say("My invoice shows two charges for March. " + text.prose(3))
        for t in range(num_calls):
            rec.call(f"{group}_{tenant}", tenant, route, agent, t, 2 * t + k, False)
            step(agent, text, t, SUPPORT_TOOLS)
    return rec
