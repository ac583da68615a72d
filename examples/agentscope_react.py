"""Train an AgentScope ReAct agent that uses a tool, with sparring.

The agent is asked to multiply two numbers and has a `multiply` tool; it earns
1 when its final answer contains the product. Its model comes from
`tuner.as_agentscope_model(...)`, so every call the agent makes (tool calls
included) is recorded, its turns merge into one sequence, and multi-step GRPO
trains a LoRA adapter on them. Works with AgentScope 2.x (`Agent`) and 1.x
(`ReActAgent`), whichever is installed.

    pip install 'sparring[agentscope]'     # AgentScope 2.x; 'sparring[agentscope1]' for 1.x
    python examples/agentscope_react.py --steps 4
"""

from __future__ import annotations

import argparse

import agentscope

from sparring import (
    AlgorithmConfig,
    DatasetConfig,
    LoggingConfig,
    TimelineFormatter,
    TunerModelConfig,
    Workflow,
    WorkflowOutput,
    tune,
)

SYSTEM = "You are a careful calculator. Call the multiply tool, then state the result as a number."
TASKS = [{"a": a, "b": b} for a in range(3, 10) for b in range(3, 7)]


def multiply(a: int, b: int) -> str:
    """Multiply two integers.

    Args:
        a (int): The first factor.
        b (int): The second factor.
    """
    return str(a * b)


async def ask_agentscope2(model, question: str) -> str:
    from agentscope.agent import Agent, ReActConfig
    from agentscope.message import UserMsg
    from agentscope.permission import PermissionBehavior, PermissionDecision
    from agentscope.tool import FunctionTool, Toolkit

    tool = FunctionTool(
        multiply, permission=PermissionDecision(behavior=PermissionBehavior.ALLOW, message="arithmetic only")
    )
    agent = Agent(
        name="solver",
        system_prompt=SYSTEM,
        model=model,
        toolkit=Toolkit(tools=[tool]),
        react_config=ReActConfig(max_iters=3),
    )
    return (await agent.reply(UserMsg(name="user", content=question))).get_text_content() or ""


async def ask_agentscope1(model, question: str) -> str:
    from agentscope.agent import ReActAgent
    from agentscope.message import Msg, TextBlock
    from agentscope.tool import Toolkit, ToolResponse

    def multiply_tool(a: int, b: int) -> ToolResponse:
        """Multiply two integers.

        Args:
            a (int): The first factor.
            b (int): The second factor.
        """
        return ToolResponse(content=[TextBlock(type="text", text=multiply(a, b))])

    toolkit = Toolkit()
    toolkit.register_tool_function(multiply_tool, func_name="multiply")
    agent = ReActAgent(
        name="solver",
        sys_prompt=SYSTEM,
        model=model,
        formatter=TimelineFormatter("solver"),
        toolkit=toolkit,
        max_iters=3,
    )
    agent.set_console_output_enabled(False)
    return (await agent(Msg("user", question, "user"))).get_text_content() or ""


class Calculator(Workflow):
    trainable_targets = ["solver"]

    async def execute(self, task, tuner):
        model = tuner.as_agentscope_model("solver", target_tag="solver")
        ask = ask_agentscope1 if agentscope.__version__.startswith("1.") else ask_agentscope2
        answer = await ask(model, f"What is {task['a']} times {task['b']}?")
        solved = str(task["a"] * task["b"]) in answer
        return WorkflowOutput(reward=float(solved), metrics={"solved": float(solved)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default="smollm2-135m-instruct", help="base model: a catalogue name or a local model directory"
    )
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--run-dir", default="runs/agentscope_react")
    args = parser.parse_args()
    result = tune(
        workflow_func=Calculator,
        train_dataset=DatasetConfig(tasks=TASKS, total_steps=args.steps),
        model=TunerModelConfig(model_path=args.model, max_tokens=args.max_tokens, lora_rank=8),
        algorithm=AlgorithmConfig(
            algorithm_type="multi_step_grpo",
            group_size=2,
            batch_size=2,
            learning_rate=1e-4,
            drop_zero_variance_groups=False,
        ),
        run_dir=args.run_dir,
        logging=LoggingConfig(tensorboard=False),
    )
    print(f"trained {result.steps} steps; metrics in {args.run_dir}/metrics.jsonl")


if __name__ == "__main__":
    main()
