"""Host-side device helpers: exact host buffers, moves that keep host tensors as they are, threads."""

import torch

from verl_lite.utils import device as dev


def test_host_buffer_holds_exactly_its_slots_aligned_and_typed():
    buf = dev.HostBuffer([10, 0, 24])
    assert buf.offsets == [0, 64, 64] and buf.nbytes == 64 + 0 + 64
    view = buf.view(2, (2, 3), torch.float32)
    view.copy_(torch.arange(6.0).view(2, 3))
    assert buf.slot(2).view(torch.float32).tolist() == [0, 1, 2, 3, 4, 5]
    assert view.data_ptr() % 64 == 0 and buf.slot(1).numel() == 0
    assert buf.pinned == dev.can_pin_memory()


def test_to_device_returns_a_host_tensor_as_is_on_the_host():
    t = torch.arange(4)
    assert dev.to_device(t, torch.device("cpu")) is t


def test_workers_get_their_share_of_the_node_cpus():
    assert dev.worker_num_threads(8, 128) == 16  # a GPU node: 8 workers, 128 CPUs
    assert dev.worker_num_threads(2, 2) == 1  # the test machine: one thread per rank
    assert dev.worker_num_threads(4, 2) == 1  # never below one
    assert dev.worker_num_threads(3, 8.0) == 2
