"""An EAGLE-style draft tree grown from the model's own top-k candidates.

The root is the token the model predicts after the prefix (the bonus token the verify
step re-reads). Depth by depth, the ``topk`` best frontier nodes (by cumulative
log-probability) each propose their ``topk`` most likely next tokens; the ``topk`` best
proposals form the next frontier. The final tree is the root plus the ``n - 1`` best
nodes by cumulative log-probability (an ancestor never scores below its descendants,
so the set is closed under ancestors), ordered so every parent comes before its children.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kdgate.smollm2 import Model, forward


@dataclass
class DraftTree:
    tokens: list[int]
    parents: list[int]      # -1 for the root
    depths: list[int]
    scores: list[float]     # cumulative log-probability

    @property
    def n(self) -> int:
        return len(self.tokens)

    def ancestors_mask(self) -> torch.Tensor:
        n = self.n
        mask = torch.zeros(n, n, dtype=torch.bool)
        for i in range(n):
            j = i
            while j >= 0:
                mask[i, j] = True
                j = self.parents[j]
        return mask

    def shape(self) -> dict:
        children = [sum(1 for p in self.parents if p == i) for i in range(self.n)]
        return {"n": self.n, "depth": max(self.depths),
                "branching_nodes": sum(1 for c in children if c > 1),
                "leaves": sum(1 for c in children if c == 0)}


def grow_tree(model: Model, past, prefix_len: int, root_logits: torch.Tensor, n: int,
              topk: int) -> DraftTree:
    """Grow an ``n``-node tree after a prefix whose per-layer cache is ``past``."""
    root_token = int(torch.argmax(root_logits))
    tokens, parents, depths, scores = [root_token], [-1], [0], [0.0]
    tree_cache = None
    frontier = [0]
    depth = 0
    all_logits: dict[int, torch.Tensor] = {}
    while len(tokens) - 1 < max(n - 1, 0) * 2 or depth < 3:
        depth += 1
        # logits (and cache rows) for the frontier nodes: they see the prefix and their ancestors
        new = [i for i in frontier if tree_cache is None or i >= tree_cache[0][0].shape[0]]
        if new:
            start = 0 if tree_cache is None else tree_cache[0][0].shape[0]
            ids = list(range(start, len(tokens)))
            anc = DraftTree(tokens, parents, depths, scores).ancestors_mask()
            mask = torch.cat((torch.ones(len(ids), prefix_len, dtype=torch.bool),
                              anc[ids][:, :len(tokens)]), dim=1)
            full_past = past if tree_cache is None else [
                (torch.cat((pk, tk)), torch.cat((pv, tv))) for (pk, pv), (tk, tv) in zip(past, tree_cache)]
            logits, new_kv, _ = forward(model, torch.tensor(tokens[start:]),
                                        torch.tensor([prefix_len + depths[i] for i in ids]),
                                        full_past, mask)
            tree_cache = new_kv if tree_cache is None else [
                (torch.cat((tk, nk)), torch.cat((tv, nv))) for (tk, tv), (nk, nv) in zip(tree_cache, new_kv)]
            all_logits.update({i: torch.log_softmax(logits[j], -1) for j, i in enumerate(ids)})
        proposals = []
        for i in frontier:
            top = torch.topk(all_logits[i], topk)
            for lp, tok in zip(top.values.tolist(), top.indices.tolist()):
                proposals.append((scores[i] + lp, i, tok))
        proposals.sort(key=lambda x: -x[0])
        frontier = []
        for score, parent, tok in proposals[:topk]:
            tokens.append(tok)
            parents.append(parent)
            depths.append(depths[parent] + 1)
            scores.append(score)
            frontier.append(len(tokens) - 1)
        if len(tokens) > 4 * n + 8:
            break
    # the n best nodes by score (root first), parents before children
    order = sorted(range(len(tokens)), key=lambda i: (-scores[i], depths[i]))[:n]
    chosen = set(order)
    for i in list(chosen):
        j = parents[i]
        while j >= 0 and j not in chosen:
            chosen.add(j)
            j = parents[j]
    keep = sorted(chosen, key=lambda i: (depths[i], -scores[i]))[:n]
    index = {old: new for new, old in enumerate(keep)}
    return DraftTree([tokens[i] for i in keep], [index.get(parents[i], -1) for i in keep],
                     [depths[i] for i in keep], [scores[i] for i in keep])
