"""(v5) Attachments through the serving path, over fakes: what the model is sent on the
turn and on later turns in the window (newest first within a prompt's limits, the rest
fenced placeholders), what the turn's record keeps, one object per distinct bytes of an
owner, nothing stored for a refused request, and what deletion, forks and erasure do
with the objects."""

from __future__ import annotations

from typing import Any

import pytest

from convo_memory.domain.attachments import FileAtUrl, FileById, InlineFile
from convo_memory.domain.errors import FileNotFound, ValidationFailed
from convo_memory.domain.prompt import Prompt
from convo_memory.domain.turns import SessionById, SessionByKey, SessionOwner, TurnCommand, UserText
from convo_memory.doors import chat_completions
from tests.fakes.app import WS, FakeApp, fake_app
from tests.support.sample_files import data_url, pdf, png

OWNER = SessionOwner("end-user-1")


def app_with(**capability: Any) -> FakeApp:
    app = fake_app()
    app.capability("cap", replay={"maxMessages": 2, "minMessages": 2}, **capability)
    return app


def image(seed: int = 0, where: str = "input.0.content.1") -> InlineFile:
    return InlineFile(png(seed=seed), "image/png", f"shot-{seed}.png", where, "image")


def turn(app: FakeApp, session_id: str, text: str, *attached: Any) -> Any:
    command = TurnCommand("cap", SessionById(session_id), UserText(text, tuple(attached)))
    return app.container.turns.serve(WS, command)


def sent_files(prompt: Prompt) -> list[list[str]]:
    """Each message's attachments as the model got them (their names)."""
    return [[s.ref.filename for s in m.attachments] for m in prompt.messages]


def test_an_image_reaches_the_model_on_its_turn_and_while_in_the_window() -> None:
    app = app_with()
    session = app.session("cap")

    first = turn(app, session, "What is this?", image())
    turn(app, session, "And now?")
    turn(app, session, "Later")

    prompts = app.provider.prompts
    assert sent_files(prompts[0]) == [["shot-0.png"]]
    assert prompts[0].messages[-1].attachments[0].data == png()
    assert sent_files(prompts[1]) == [["shot-0.png"], [], []]  # replayed with its message
    assert sent_files(prompts[2]) == [[], [], []]  # its message left the window
    (message, _), _ = app.container.sessions.messages(WS, session, 2)
    assert [ref.filename for ref in message.attachments] == ["shot-0.png"]
    assert message.attachments[0].file_id.startswith("file-u")
    assert first.recorded and len(app.attachments.objects) == 1


def test_the_same_bytes_of_one_owner_are_stored_once_and_another_owner_gets_its_own() -> None:
    app = app_with()
    one, two = app.session("cap"), app.session("cap")
    other = app.session("cap", external_ref="end-user-2")

    turn(app, one, "a", image())
    turn(app, two, "b", image(where="x"))
    turn(app, other, "c", image())

    assert app.attachments.puts == 2
    owners = {owner for (_, owner, _) in app.attachments.objects}
    assert len(owners) == 2


def test_a_prompt_carries_the_newest_20_images_and_the_rest_as_fenced_placeholders() -> None:
    app = fake_app()
    app.capability("cap")
    session = app.session("cap")
    turn(app, session, "first", *(image(seed, f"a.{seed}") for seed in range(3)))

    turn(app, session, "second", *(image(seed, f"b.{seed}") for seed in range(10, 29)))

    prompt = app.provider.prompts[-1]
    assert sum(len(m.attachments) for m in prompt.messages) == 20
    first_message = prompt.messages[0]
    assert [s.ref.filename for s in first_message.attachments] == ["shot-2.png"]
    nonce = prompt.fence_nonce
    assert f'<data-{nonce} kind="attachments">' in first_message.content
    assert "[image: shot-0.png, " in first_message.content
    assert "[image: shot-1.png, " in first_message.content


def test_a_refused_attachment_stores_nothing_and_opens_nothing() -> None:
    app = app_with(attachments={"images": False})
    by_key = SessionByKey("k", OWNER)
    command = TurnCommand("cap", by_key, UserText("look", (image(),)))

    with pytest.raises(ValidationFailed) as refused:
        app.container.turns.serve(WS, command)

    assert refused.value.param == "input.0.content.1"
    assert app.attachments.objects == {} and app.db.heads == {}


def test_a_url_the_policy_refuses_is_422_naming_the_part_and_fetched_urls_are_kept() -> None:
    app = app_with()
    session = app.session("cap")
    private = FileAtUrl("http://169.254.169.254/latest", "input.0.content.1.image_url", "image")
    with pytest.raises(ValidationFailed) as refused:
        turn(app, session, "look", private)
    assert refused.value.param == "input.0.content.1.image_url"
    assert app.attachments.objects == {}

    app.fetcher.pages["https://cdn.example/a.png"] = (png(), "image/png")
    turn(app, session, "look", FileAtUrl("https://cdn.example/a.png", "x", "image"))
    assert len(app.attachments.objects) == 1


def test_a_file_id_names_an_upload_or_an_earlier_attachment_of_the_workspace() -> None:
    app = app_with()
    session = app.session("cap")
    uploaded = app.container.files.upload(
        WS, pdf(), "terms.pdf", "application/pdf", "user_data", None
    )

    turn(app, session, "read it", FileById(uploaded.file_id, "attachments.0"))

    assert sent_files(app.provider.prompts[-1])[-1] == ["terms.pdf"]
    with pytest.raises(FileNotFound):
        turn(app, session, "again", FileById("file-" + "0" * 24, "attachments.0"))
    with pytest.raises(FileNotFound):
        app.container.turns.serve(
            "ws_other", TurnCommand("cap", None, UserText("x", (FileById(uploaded.file_id, "a"),)))
        )


def test_a_stateless_turn_passes_attachments_through_and_stores_nothing() -> None:
    app = app_with()
    body = {
        "model": "cap",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": data_url("image/png", png(seed=1))}}
                ],
            },
            {"role": "assistant", "content": "A red square."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "And this?"},
                    {"type": "image_url", "image_url": {"url": data_url("image/png", png())}},
                ],
            },
        ],
    }
    chat = chat_completions.read_chat_turn(body, {})

    app.container.turns.serve(WS, chat.command)

    assert sent_files(app.provider.prompts[-1]) == [["image.png"], [], ["image.png"]]
    assert app.attachments.objects == {} and app.attachments.puts == 0


def test_deletion_releases_objects_and_a_fork_keeps_what_it_inherited() -> None:
    app = app_with()
    parent = app.session("cap")
    turn(app, parent, "look", image())
    fork = app.container.forks.fork(WS, parent, 2)

    app.container.sessions.delete(WS, parent)
    assert len(app.attachments.objects) == 1  # the fork still refers to it
    turn(app, fork.id, "and?")
    assert sent_files(app.provider.prompts[-1])[0] == ["shot-0.png"]

    app.container.sessions.delete(WS, fork.id)
    assert app.attachments.objects == {}


def test_an_erasure_leaves_no_object_of_the_end_user() -> None:
    app = app_with()
    session = app.session("cap")
    kept = app.session("cap", external_ref="someone-else")
    turn(app, session, "look", image())
    turn(app, kept, "look", image(seed=5))

    erasure = app.container.erasures.request(WS, "end-user-1")
    (job,) = [b for b in app.erasure_queue.bodies if b.get("erasureId") == erasure.id]
    from convo_memory.domain.jobs import ErasureJob

    app.container.erasures.run(ErasureJob.model_validate(job))

    assert [owner for (_, owner, _) in app.attachments.objects] == [
        app.container.attachments.owner_of(app.container.sessions.get(WS, kept))
    ]


def test_a_turn_paused_for_the_apps_tools_keeps_its_image_and_sends_it_again() -> None:
    from tests.fakes.adapters import ScriptedModel
    from tests.support.turns import app_tools, app_turn

    model = ScriptedModel(
        [("call_w", "get_weather", {"city": "Paris"})], "Sunny, and a red square."
    )
    app = fake_app(provider=model)  # type: ignore[arg-type]
    app.capability("cap")
    session = app.session("cap")
    command = TurnCommand(
        "cap",
        SessionById(session),
        UserText("Weather for this?", (image(),)),
        app_tools=app_tools("get_weather"),
    )
    paused = app.container.turns.serve(WS, command)
    assert paused.finish == "tool_calls"

    ended = app_turn(app.container, WS, "cap", [("call_w", "Sunny")], session)

    assert ended.recorded
    assert [s.ref.filename for s in model.steps[-1].prompt.messages[-1].attachments] == [
        "shot-0.png"
    ]
    (message, _), _ = app.container.sessions.messages(WS, session, 2)
    assert [ref.filename for ref in message.attachments] == ["shot-0.png"]


def test_a_connection_that_takes_images_by_url_is_sent_links_not_bytes() -> None:
    from convo_memory.domain.attachment_plan import AttachmentForm

    app = app_with()
    app.provider.attachment_form = AttachmentForm(by_url=True)  # type: ignore[attr-defined]
    session = app.session("cap")

    turn(app, session, "look", image())
    turn(app, session, "again")

    for prompt in app.provider.prompts:
        (sent,) = [s for m in prompt.messages for s in m.attachments]
        assert sent.data is None and sent.url is not None and "expires=300" in sent.url
