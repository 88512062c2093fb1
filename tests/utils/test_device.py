"""Host-side device helpers: exact host buffers, moves that keep host tensors as they are, threads."""

import pytest
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


def test_a_cpu_worker_gets_one_thread_and_a_gpu_worker_its_share_of_the_node():
    assert dev.worker_num_threads(2, 64, use_gpu=False) == 1, "CPU: one thread per rank on any machine"
    assert dev.worker_num_threads(1, 2, use_gpu=False) == 1
    assert dev.worker_num_threads(8, 128, use_gpu=True) == 16  # a GPU node: 8 workers, 128 CPUs
    assert dev.worker_num_threads(3, 8.0, use_gpu=True) == 2
    assert dev.worker_num_threads(4, 2, use_gpu=True) == 1  # never below one
    assert dev.worker_num_threads(2, 64, use_gpu=False, requested=4) == 4, "OMP_NUM_THREADS wins"
    assert dev.worker_num_threads(8, 128, use_gpu=True, requested=1) == 1


def test_omp_num_threads_is_read_as_a_positive_count():
    assert dev.requested_threads({}) is None and dev.requested_threads({"OMP_NUM_THREADS": ""}) is None
    assert dev.requested_threads({"OMP_NUM_THREADS": " 6 "}) == 6
    for bad in ("0", "two", "-1", "1.5"):
        with pytest.raises(ValueError, match=f"OMP_NUM_THREADS='{bad}' is not a positive whole number"):
            dev.requested_threads({"OMP_NUM_THREADS": bad})
