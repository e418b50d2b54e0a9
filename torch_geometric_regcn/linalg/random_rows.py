r"""Random blocks whose rows depend on their global row index only, so that
a solver on row shards starts where the single-process one does."""
import hashlib
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import Group, consensus

#: Rows drawn from one generator: a rank draws the chunks its rows touch,
#: at most two of them partly.
ROW_CHUNK = 65536


def _chunk_seed(seed: int, draw: int, chunk: int) -> int:
    r"""A 63-bit seed for chunk :obj:`chunk` of draw :obj:`draw`."""
    message = b'%d/%d/%d' % (seed, draw, chunk)
    return int.from_bytes(hashlib.blake2b(message, digest_size=8).digest(), 'little') >> 1


class RandomRows:
    r"""Standard normal blocks of :obj:`num_rows` rows, of which this
    process holds rows :obj:`start` to :obj:`end`. Every draw is cut into
    chunks of :data:`ROW_CHUNK` rows (:obj:`num_rows` when fewer), each drawn
    whole from its own generator, seeded by the stream's :obj:`seed`, the
    draw's number and the chunk's index: row :math:`i` of a draw has the
    same value whichever rows a process holds, so a row-sharded block
    Lanczos starts, and refills a dependent block, exactly where the
    single-process one does (the iterations then differ only by the
    rounding of their sums). Cost: as one :func:`torch.randn` of the rows
    held, plus at most two chunks drawn in part.

    With :obj:`rows`, the process holds the rows of those global indices
    instead (a METIS shard's :obj:`node_id`, the rows' original indices), and
    draws every chunk they touch: the values of one process on the original
    numbering, at the cost of up to :math:`N` rows per draw.

    Args:
        seed (int): The stream's seed, the same on every rank.
        num_rows (int): The rows :math:`N` of the whole block.
        start (int): This process's first row.
        end (int): One past its last row.
        dtype (torch.dtype): The blocks' dtype.
        device (torch.device): Their device.
        rows (torch.Tensor, optional): The global index of each row held,
            :obj:`[end - start]`, distinct. (default: :obj:`None`, the rows
            :obj:`start` to :obj:`end - 1`)
    """

    def __init__(self, seed: int, num_rows: int, start: int, end: int, dtype: torch.dtype,
                 device: torch.device, rows: Optional[Tensor] = None):
        self.seed, self.num_rows, self.start, self.end = seed, num_rows, start, end
        self.dtype, self.device = dtype, device
        self.chunk = max(1, min(ROW_CHUNK, num_rows))
        self.draws = 0
        self.segments: Optional[List[Tuple[int, Tensor, Tensor]]] = None
        if rows is not None:  # the rows held, grouped by chunk: (chunk, positions, offsets)
            rows = rows.to(device)
            order = torch.argsort(rows // self.chunk, stable=True)
            chunks, counts = torch.unique_consecutive(rows[order] // self.chunk,
                                                      return_counts=True)
            self.segments = []
            for chunk, held in zip(chunks.tolist(), torch.split(order, counts.tolist())):
                self.segments.append((chunk, held, rows[held] - chunk * self.chunk))

    @classmethod
    def seeded(cls, generator: Optional[torch.Generator], num_rows: int, start: int,
               end: int, dtype: torch.dtype, device: torch.device,
               group: Group = None, rows: Optional[Tensor] = None) -> 'RandomRows':
        r"""A stream seeded by one draw from :obj:`generator` (torch's default
        generator when :obj:`None`); with a :obj:`group`, rank 0's draw on
        every rank (one broadcast), so that ranks whose generators differ
        still draw one block."""
        seed = int(torch.randint(2**62, (1,), generator=generator,
                                 device=generator.device if generator is not None else 'cpu'))
        seed, = consensus([seed], group)
        return cls(seed, num_rows, start, end, dtype, device, rows)

    def _generator(self, draw: int, chunk: int) -> torch.Generator:
        generator = torch.Generator(self.device)
        generator.manual_seed(_chunk_seed(self.seed, draw, chunk))
        return generator

    def draw(self, columns: int, out: Optional[Tensor] = None) -> Tensor:
        r"""This process's rows of the next :math:`N \times` :obj:`columns`
        block, written into :obj:`out` when given."""
        rows = self.end - self.start
        if out is None:
            out = torch.empty(rows, columns, dtype=self.dtype, device=self.device)
        draw, self.draws = self.draws, self.draws + 1
        if rows == 0 or columns == 0:
            return out
        if self.segments is not None:  # the rows of given global indices
            for chunk, held, offsets in self.segments:
                values = torch.randn(self.chunk, columns, dtype=self.dtype,
                                     device=self.device, generator=self._generator(draw, chunk))
                out[held] = values[offsets]
            return out
        for chunk in range(self.start // self.chunk, (self.end - 1) // self.chunk + 1):
            values = torch.randn(self.chunk, columns, dtype=self.dtype, device=self.device,
                                 generator=self._generator(draw, chunk))
            first = chunk * self.chunk
            low, high = max(self.start, first), min(self.end, first + self.chunk)
            out[low - self.start:high - self.start] = values[low - first:high - first]
        return out
