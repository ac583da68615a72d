"""A tabular model of the learning suite's convention game, to ask what lets two roles escape a pooled start.

Each role is a 3 x 3 table of logits (speaker: item -> signal, listener: signal -> item), trained as the suite
trains the LLM: 16 tasks x 4 episodes a step, exploration `eps` with exact importance weights, GRPO advantages
per group, Adam. `coupling` adds the mean of a step's per-context gradients to every context (how a shared LoRA
update moves every context's reply together); `ent` adds an exact entropy bonus. Prints the final success
(expected, over the tables) for six seeds per setting.

    python dev/convention_tabular.py
"""

import numpy as np


def softmax(logits):
    exp = np.exp(logits - logits.max(-1, keepdims=True))
    return exp / exp.sum(-1, keepdims=True)


def run(seed, steps=100, lr=3e-3, ent=0.0, eps=0.1, init=4.0, coupling=0.0, tasks=16, group=4):
    rng = np.random.default_rng(seed)
    speaker, listener = np.zeros((3, 3)), np.zeros((3, 3))
    speaker[:, 0], listener[:, 0] = init * 0.4, init  # pooled: signal 0 for every item, item 0 for every signal
    speaker += rng.normal(0, 0.1, (3, 3))
    listener += rng.normal(0, 0.1, (3, 3))
    first = {"s": np.zeros((3, 3)), "l": np.zeros((3, 3))}
    second = {"s": np.zeros((3, 3)), "l": np.zeros((3, 3))}
    for step in range(1, steps + 1):
        p_s, p_l = softmax(speaker), softmax(listener)
        q_s, q_l = (1 - eps) * p_s + eps / 3, (1 - eps) * p_l + eps / 3
        grad = {"s": np.zeros((3, 3)), "l": np.zeros((3, 3))}
        for _ in range(tasks):
            item, played = rng.integers(3), []
            for _ in range(group):
                signal = rng.choice(3, p=q_s[item])
                guess = rng.choice(3, p=q_l[signal])
                weight = p_s[item, signal] / q_s[item, signal] * p_l[signal, guess] / q_l[signal, guess]
                played.append((signal, guess, float(guess == item), weight))
            rewards = np.array([reward for _, _, reward, _ in played])
            if rewards.std() == 0:
                continue
            advantages = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
            for (signal, guess, _, weight), advantage in zip(played, advantages, strict=True):
                grad["s"][item] += weight * advantage * (np.eye(3)[signal] - p_s[item])
                grad["l"][signal] += weight * advantage * (np.eye(3)[guess] - p_l[signal])
        for key, table in (("s", speaker), ("l", listener)):
            p = softmax(table)
            entropy = -(p * np.log(p)).sum(-1, keepdims=True)
            g = grad[key] + ent * tasks * group / 3 * (-p * (np.log(p) + entropy))
            g = g + coupling * g.mean(0, keepdims=True)
            first[key] = 0.9 * first[key] + 0.1 * g
            second[key] = 0.999 * second[key] + 0.001 * g * g
            table += lr * (first[key] / (1 - 0.9**step)) / (np.sqrt(second[key] / (1 - 0.999**step)) + 1e-8)
    p_s, p_l = softmax(speaker), softmax(listener)
    return sum(p_s[item, signal] * p_l[signal, item] for item in range(3) for signal in range(3)) / 3


if __name__ == "__main__":
    for setting in [
        {"lr": 0.03},
        {"lr": 0.1},
        {"lr": 0.1, "coupling": 3},
        {"lr": 0.1, "coupling": 3, "ent": 0.1},
    ]:
        print(setting, [round(float(run(seed, **setting)), 2) for seed in range(6)])
