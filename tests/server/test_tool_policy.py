from recipe.server.tool_policy import single_tool_call


def test_named_choice_or_parallel_off_means_one_call() -> None:
    named_chat = {"tool_choice": {"type": "function", "function": {"name": "f"}}}
    assert single_tool_call("chat", named_chat)
    assert single_tool_call("chat", b'{"tool_choice": "required", "parallel_tool_calls": false}')
    assert not single_tool_call("chat", {"tool_choice": "required"})
    assert not single_tool_call("chat", b"not json")
    assert single_tool_call("messages", {"tool_choice": {"type": "tool", "name": "f"}})
    assert single_tool_call("messages", {"tool_choice": {"type": "any", "disable_parallel_tool_use": True}})
    assert not single_tool_call("messages", {"tool_choice": {"type": "any"}})
    assert single_tool_call("responses", {"tool_choice": {"type": "function", "name": "f"}})
    assert single_tool_call("responses", {"tool_choice": "required", "max_tool_calls": 1})
    assert not single_tool_call("responses", {"tool_choice": "required"})
