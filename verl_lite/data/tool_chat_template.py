"""A chat template with tools, in Qwen2.5's hermes layout, for the tiny tokenizer (tiny_tokenizer.py).

The tiny tokenizer's own template renders role and content only. Multi-turn tool use needs what
Qwen2.5's template adds, in the same text so that the `hermes` parser and verl's data read the same:
  - with `tools=`: a system turn listing the tool schemas (one JSON object per line inside
    <tools></tools>) and the instruction to answer calls as <tool_call>{"name": ..., "arguments":
    ...}</tool_call>, after the conversation's own system message if it has one;
  - a `tool` message: inside a user turn as <tool_response>...</tool_response> (consecutive tool
    messages share one user turn);
  - an assistant message's `tool_calls`: each as a <tool_call> block after its content (Qwen2.5's
    spacing: a newline before each block, none after the role when there is no content).
Unlike Qwen2.5 it adds no default system prompt. For conversations without tools, tool messages or
tool calls it renders exactly what the tiny tokenizer's template renders (tests/data check it), so
a model trained on the plain template reads the same prompts. Every character is printable ASCII
or a newline: the tiny byte-level vocabulary covers it with no new token.

Use it as `actor_rollout_ref.model.custom_chat_template` (or set `tokenizer.chat_template`).
"""

TOOL_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages and messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
    '{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}'
    "\\n</tool_call><|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m['role'] == 'system' and loop.first and tools %}"
    "{%- elif m['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + m['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}"
    "{%- if m['tool_calls'] %}"
    "{{- '<|im_start|>' + m['role'] + ('\\n' + m['content'] if m['content'] else '') }}"
    "{%- else %}{{- '<|im_start|>' + m['role'] + '\\n' + (m['content'] or '') }}{%- endif %}"
    "{%- for call in (m['tool_calls'] or []) %}"
    "{%- set f = call['function'] if call['function'] is defined else call %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + f['name'] + '\", \"arguments\": ' + (f['arguments'] | tojson) + '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
