"""The parser registry: multi_turn.format picks a parser by name; an unknown name is refused in one
line naming the formats; a user's parser written for verl registers from its file and runs in the
tool agent loop, as does each built-in format."""

import asyncio
import sys

import pytest

from tests.agent_loop.scripted import tool_tokenizer
from tests.agent_loop.test_tool_agent import ANSWER, TOOL_7, run
from verl_lite.agent_loop.parsers.hermes import HermesToolParser
from verl_lite.agent_loop.tool_parser import (
    FunctionCall,
    ToolCall,
    ToolParser,
    as_tool_call,
    check_format,
    known_formats,
)

MT = "actor_rollout_ref.rollout.multi_turn"
FORMATS = ["glm", "gpt-oss", "hermes", "qwen3_coder"]
# a user's parser, written for verl: calls as `CALL name {json}` lines, returned as verl's FunctionCall
USER_PARSER = """
import json

from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser


@ToolParser.register("call_lines")
class CallLineParser(ToolParser):
    async def extract_tool_calls(self, responses_ids, tools=None):
        text = self.tokenizer.decode(responses_ids, skip_special_tokens=True)
        calls = [line.split(" ", 2)[1:] for line in text.splitlines() if line.startswith("CALL ")]
        content = "\\n".join(line for line in text.splitlines() if not line.startswith("CALL "))
        return content, [FunctionCall(name=name, arguments=arguments) for name, arguments in calls]
"""


@pytest.fixture
def registry(monkeypatch):
    """The registry as it is, restored after the test (a user's parser registers into it)."""
    monkeypatch.setattr(ToolParser, "_registry", dict(ToolParser._registry))
    monkeypatch.delenv("VERL_USE_EXTERNAL_MODULES", raising=False)


@pytest.fixture
def user_parser(tmp_path, monkeypatch, registry):
    (tmp_path / "my_tool_parser.py").write_text(USER_PARSER)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", "my_tool_parser")
    sys.modules.pop("my_tool_parser", None)  # imported afresh: it registers into this test's registry
    yield
    sys.modules.pop("my_tool_parser", None)


def test_a_format_whose_turn_end_the_model_does_not_stop_at_is_refused_by_the_model_folder(tmp_path):
    """gpt-oss ends a call with <|call|>, GLM a tool turn with <|observation|>: a rollout stops at the
    model's EOS and its generation_config.json's eos_token_id list (vLLM's rule), so start-up checks
    that the list has the format's token (gpt-oss's and GLM's own folders do): a folder without it,
    or a tokenizer without the token, is one line naming the fix."""
    import json

    from transformers import AutoTokenizer

    from tests.helpers.gpt_oss_model import CALL, make_gpt_oss_model_dir
    from verl_lite.agent_loop.checks import check_turn_end
    from verl_lite.config.compose import load_config

    model = make_gpt_oss_model_dir(str(tmp_path / "gpt_oss"), [(1, 2)], steps=1)
    tokenizer = AutoTokenizer.from_pretrained(model)
    call_id = tokenizer.convert_tokens_to_ids(CALL)

    def problems(fmt):
        cfg = load_config([f"actor_rollout_ref.model.path={model}", f"{MT}.format={fmt}"], "demo")
        return check_turn_end(cfg, None, tokenizer)

    assert problems("gpt-oss") == [] and problems("hermes") == []  # the folder lists <|call|>; no end token
    generation = tmp_path / "gpt_oss" / "generation_config.json"
    config = json.loads(generation.read_text())
    assert call_id in config["eos_token_id"]
    generation.write_text(json.dumps(config | {"eos_token_id": [tokenizer.eos_token_id]}))
    assert problems("gpt-oss") == [
        f"{MT}.format='gpt-oss' ends a tool-calling turn with <|call|> (id {call_id}), but the model stops only "
        f"at [{tokenizer.eos_token_id}] (its EOS and generation_config.json's eos_token_id, {model!r}), so it "
        f"would write past its call; add {call_id} to that list, as the format's own models do"
    ]
    assert problems("glm") == [
        f"{MT}.format='glm' ends a tool-calling turn with <|observation|>, which the tokenizer of {model!r} does "
        "not have: use a model of that format, or another format"
    ]


def test_formats_by_name_and_an_unknown_one_refused_in_one_line(registry):
    assert known_formats() == FORMATS
    assert isinstance(ToolParser.get_tool_parser("hermes", None), HermesToolParser)
    assert check_format("hermes") == []
    [line] = check_format("llama3_json")
    assert line.startswith(
        "actor_rollout_ref.rollout.multi_turn.format='llama3_json' is not a tool-call format; "
        f"the formats are {FORMATS} (your own: @ToolParser.register('llama3_json') in a module that "
        "VERL_USE_EXTERNAL_MODULES"
    )
    with pytest.raises(
        ValueError, match=r"format='llama3_json' is not a tool-call format; the formats are \["
    ):
        ToolParser.get_tool_parser("llama3_json", None)


def test_a_function_call_becomes_a_tool_call_or_a_malformed_one():
    assert as_tool_call(FunctionCall(name="add", arguments='{"a": 1}')) == ToolCall("add", {"a": 1})
    assert as_tool_call(FunctionCall(name="now", arguments="")) == ToolCall("now", {})
    assert "not valid JSON" in as_tool_call(FunctionCall(name="add", arguments="{a")).error
    assert "JSON object" in as_tool_call(FunctionCall(name="add", arguments="[1]")).error


def test_a_users_parser_registers_from_its_file_as_in_verl(user_parser):
    assert check_format("call_lines") == [] and "call_lines" in known_formats()
    tok = tool_tokenizer()
    parser = ToolParser.get_tool_parser("call_lines", tok)
    ids = tok('sure\nCALL add {"a": 1}', add_special_tokens=False)["input_ids"]
    loop = asyncio.new_event_loop()
    try:
        content, calls = loop.run_until_complete(parser.extract_tool_calls(ids))
    finally:
        loop.close()
    assert content == "sure" and [as_tool_call(c) for c in calls] == [ToolCall("add", {"a": 1})]


def test_with_verl_installed_a_parser_registered_with_verls_toolparser_is_found(registry, monkeypatch):
    class VerlToolParser:  # verl's own class, as `import verl` gives it where verl is installed
        _registry = {"call_lines": object, "hermes": object}

    monkeypatch.setitem(sys.modules, "verl.experimental.agent_loop.tool_parser", type(sys)("verl_tp"))
    monkeypatch.setattr(
        sys.modules["verl.experimental.agent_loop.tool_parser"], "ToolParser", VerlToolParser, raising=False
    )
    assert known_formats() == ["call_lines", *FORMATS]
    assert isinstance(ToolParser.get_tool_parser("hermes", None), HermesToolParser)  # ours win a shared name


def test_a_module_that_does_not_import_is_named(registry, monkeypatch):
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", "no_such_parser_module")
    [line] = check_format("hermes")
    assert line.startswith("VERL_USE_EXTERNAL_MODULES='no_such_parser_module': ModuleNotFoundError")


CALLS_7 = {
    "hermes": '<tool_call>{"name": "calc_gsm8k_reward", "arguments": {"answer": "7"}}</tool_call><|im_end|>',
    "gpt-oss": '<|channel|>commentary to=functions.calc_gsm8k_reward <|constrain|>json<|message|>{"answer": "7"}<|call|>',
    "qwen3_coder": "<tool_call>\n<function=calc_gsm8k_reward>\n<parameter=answer>\n7\n</parameter>\n</function>\n</tool_call>",
    "glm": '<tool_call>calc_gsm8k_reward\n<arg_key>answer</arg_key>\n<arg_value>"7"</arg_value>\n</tool_call>',
    "call_lines": 'CALL calc_gsm8k_reward {"answer": "7"}<|im_end|>',
}


@pytest.mark.parametrize("fmt", [*FORMATS, "call_lines"])
def test_the_tool_agent_loop_calls_the_tool_in_each_format(tmp_path, fmt, request):
    if fmt == "call_lines":
        request.getfixturevalue("user_parser")
    tok, engine, out = run(tmp_path, [[CALLS_7[fmt], ANSWER]], format=fmt)
    assert out.non_tensor_batch["__num_turns__"].tolist() == [4]  # a call, its result, the answer
    assert out.non_tensor_batch["agent_loop_stats"][0]["tool_malformed"] == 0
    second = tok.decode(list(engine.calls[1][0].prompt_ids))
    # the turn separator only after a turn that ended at <|im_end|> (chat_render.py)
    reply = TOOL_7 if CALLS_7[fmt].endswith("<|im_end|>") else TOOL_7.removeprefix("\n")
    if fmt == "gpt-oss":  # verl 0.9.0's gpt-oss layout (utils.py, its builder): the text raw, not JSON-quoted
        reply = (
            "<|start|>functions.calc_gsm8k_reward to=assistant<|channel|>commentary<|message|>"
            "Current parsed answer='7' reward=1.0<|end|><|im_start|>assistant\n"
        )
    assert second.endswith(CALLS_7[fmt] + reply)  # the tool's answer: reward 1.0 for "7"
