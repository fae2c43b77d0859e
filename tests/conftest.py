"""Shared test set-up: the backend's test modules, quiet TensorFlow, two logical CPUs,
deterministic seeds.

The Keras backend comes from the environment (`KERAS_BACKEND`, each backend in its own
process). On TensorFlow every test module is collected; on JAX and PyTorch only the
backend-neutral ones (`BACKEND_NEUTRAL`), which use NumPy inputs and `keras.ops` and
import TensorFlow at most as the image-file pipeline (tf.data decoding, installed where
CI runs them): the rest test TensorFlow itself (tf.data, tf.function and XLA
modes, SavedModel export, tf.distribute) or have not been written backend-neutral yet.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import pytest  # noqa: E402

BACKEND = keras.backend.backend()

#: The test modules that run on every backend (tests/<name>); CI runs them under
#: KERAS_BACKEND=jax and =torch besides the TensorFlow run of the whole suite.
BACKEND_NEUTRAL = (
    "test_backend_augmentation.py",
    "test_backend_contract.py",
    "test_backend_engine.py",
    "test_backend_evaluation.py",
    "test_backend_models.py",
    "test_backend_pair_losses.py",
    "test_backend_softmax_losses.py",
    "test_batch_norm.py",
    "test_convolution.py",
    "test_data_arrays.py",
    "test_own_images_backends.py",
    "test_pooling.py",
    "test_without_tensorflow.py",
)

#: Backend-neutral modules whose unit has a TensorFlow path of its own that no other
#: module tests: in the quick tier on TensorFlow too.
QUICK_ON_TENSORFLOW = ("test_batch_norm.py",)

if BACKEND == "tensorflow":
    import tensorflow as tf

    # Two logical CPU devices, so tf.distribute tests can mirror over two replicas. It
    # must happen before TensorFlow initialises its devices, hence here.
    _cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        _cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
    )
else:
    collect_ignore_glob = [
        name for name in os.listdir(os.path.dirname(os.path.abspath(__file__)))
        if name.startswith("test_") and name.endswith(".py") and name not in BACKEND_NEUTRAL
    ]

from benchmarks.data import SHARED as _SHARED_DATASETS  # noqa: E402

#: ../shared/datasets beside the repository (or beside its parent, for a worktree): the
#: real data every test and benchmark reads (tests fail loudly where it is missing)
SHARED_DATASETS = os.path.abspath(_SHARED_DATASETS)


@pytest.fixture(autouse=True)
def _float32_policy_and_seed():
    """Every test starts in float32 with fixed seeds, whatever the previous one did."""
    keras.mixed_precision.set_global_policy("float32")
    keras.utils.set_random_seed(0)
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.fixture(scope="session")
def mirrored_strategy():
    """One MirroredStrategy over the two logical CPUs for the whole session.

    Each new strategy restarts TensorFlow's collective instance keys, and a later
    strategy's all-reduce of a different size would collide with an earlier one's.
    """
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


@pytest.fixture
def mixed_precision():
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy("float32")


def pytest_addoption(parser):
    parser.addoption(
        "--full", action="store_true", default=False,
        help="also run the tests marked slow (peer references against PyTorch, PML and faiss, "
             "training runs, multi-worker and kill-and-resume runs, the benchmarks' end-to-end "
             "checks); CI runs the full suite")


#: Test functions (all their parameters) in the full tier only, besides those marked
#: `@pytest.mark.slow` in their files: the heaviest of the quick tier in a measured run
#: (`pytest -q -n 2 --durations=0`, 2026-11-26), each 20 s or more in all on 2 busy cores.
SLOW_FUNCTIONS = {
    "tests/test_losses_cross_batch_memory.py::test_wrapped_loss_weights_are_trained_and_saved_with_the_model",
    "tests/test_data_designs.py::test_samplers_draw_pairs_with_the_paper_q",
    "tests/test_cli.py::test_import_keras_dml_registers_every_serializable_class",
    "tests/test_data_pipeline.py::test_mirrored_strategy_each_replica_gets_whole_classes",
    "tests/test_export.py::test_export_from_keras_file_via_cli_arguments",
    "tests/test_export.py::test_subprocess_never_imported_keras_dml",
    "tests/test_faults_precision.py::test_a_nan_image_stops_mixed_precision_training_with_a_clear_error",
    "tests/test_faults_precision.py::test_every_registered_loss_is_finite_or_a_clear_error_at_1e30",
    "tests/test_faults_precision.py::test_every_registered_loss_is_finite_under_mixed_precision",
    "tests/test_faults_resume.py::test_a_crash_at_any_stage_of_a_save_leaves_a_usable_backup",
    "tests/test_index.py::test_save_and_load_in_a_new_process_search_the_same",
    "tests/test_losses_additive_margin.py::test_dml_model_trains_saves_and_classifies",
    "tests/test_losses_additive_margin.py::test_modes_mixed_precision_and_degenerate",
    "tests/test_losses_cases.py::test_degenerate_batches_are_finite_and_zero",
    "tests/test_losses_cases.py::test_eager_function_and_jit_agree",
    "tests/test_losses_cases.py::test_model_compiled_with_loss_trains_and_survives_save_load",
    "tests/test_losses_contract.py::test_degenerate_batches_are_finite",
    "tests/test_losses_contract.py::test_each_query_against_a_reference_set_is_that_query_alone_with_it",
    "tests/test_losses_contract.py::test_mixed_precision_is_float32",
    "tests/test_losses_contract.py::test_modes_agree_and_weights_are_exact",
    "tests/test_losses_contract.py::test_reference_set_form_equals_the_batch_form",
    "tests/test_losses_contract.py::test_serialization_and_compile_by_name",
    "tests/test_losses_contract.py::test_xla_terms_equal_the_graph_terms_on_both_sides_of_the_size_limit",
    "tests/test_losses_cross_batch_memory.py::test_fit_fills_evaluate_does_not_and_the_memory_is_saved_with_the_model",
    "tests/test_losses_cross_batch_memory.py::test_mirrored_replicas_enqueue_the_gathered_batch_and_train_like_one_device",
    "tests/test_losses_cross_batch_memory.py::test_momentum_encoder_fills_the_memory_with_its_keys_and_is_saved",
    "tests/test_losses_cross_batch_memory.py::test_wrapped_losses_are_finite_with_xla_and_empty_slots",
    "tests/test_losses_histogram.py::test_value_matches_eq3_and_weights_are_eq9_and_autodiff",
    "tests/test_losses_ice.py::test_finite_at_large_scale_float32_and_mixed_precision",
    "tests/test_losses_ice.py::test_gradient_reaches_embeddings_by_chain_rule",
    "tests/test_losses_ice.py::test_mixed_float16_policy_matches_float32",
    "tests/test_losses_ice.py::test_value_and_weights_match_reference",
    "tests/test_losses_margin.py::test_margin_degenerate_and_easy_batches",
    "tests/test_losses_margin.py::test_margin_matches_eq3_and_autodiff",
    "tests/test_losses_margin.py::test_margin_with_distance_weighted_miner_uses_the_kept_pairs",
    "tests/test_losses_nca.py::test_nca_degenerate_batches",
    "tests/test_losses_nca.py::test_nca_matches_reference_and_autodiff",
    "tests/test_losses_nca.py::test_nca_serialization_and_mixed_precision",
    "tests/test_losses_npair.py::test_npair_degenerate_and_easy_batches",
    "tests/test_losses_npair.py::test_npair_matches_reference_and_autodiff",
    "tests/test_losses_npair.py::test_npair_one_per_class_batch_mean_equals_the_per_sample_path",
    "tests/test_losses_npair.py::test_npair_one_per_class_is_n_pair_mc",
    "tests/test_losses_proxies.py::test_dml_model_trains_saves_and_resumes",
    "tests/test_losses_proxies.py::test_labels_outside_the_classes_are_an_error",
    "tests/test_losses_row_blocks.py::test_row_blocks_equal_the_whole_matrix_against_a_key_set",
    "tests/test_losses_row_blocks.py::test_row_blocks_equal_the_whole_matrix_on_the_batch",
    "tests/test_mining_distance_weighted.py::test_distance_weighted_frequencies_follow_inverse_density",
    "tests/test_models.py::test_fit_starts_one_pass_over_a_dataset_after_the_first_call",
    "tests/test_models.py::test_mirrored_strategy_update_equals_single_device_on_the_concatenated_batch",
    "tests/test_models.py::test_mirrored_update_equals_single_device_for_every_loss",
    "tests/test_models.py::test_mixed_precision_training_keeps_float32_embeddings",
    "tests/test_multilevel.py::test_resnet50_multilevel_trains_with_ice",
}


def pytest_collection_modifyitems(config, items):
    """The quick tier: without --full (or a -m expression naming slow), slow tests are left out."""
    for item in items:
        if item.nodeid.split("[")[0] in SLOW_FUNCTIONS:
            item.add_marker(pytest.mark.slow)
        # On TensorFlow the backend-neutral modules repeat what the TensorFlow tests of
        # the same units check in the quick tier: there they are full-tier only.
        if (BACKEND == "tensorflow" and item.path.name in BACKEND_NEUTRAL
                and item.path.name not in QUICK_ON_TENSORFLOW):
            item.add_marker(pytest.mark.slow)
    if config.getoption("--full") or "slow" in (config.getoption("markexpr") or ""):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
