/* model/engine_tuning.c - the switches of the fast backends as a
 * configuration table (moon_engine_tuning_t): thresholds that choose among
 * the CPU kernels and passes, the kernel ISA, CUDA graphs. Read once per
 * engine create; tests and A/B runs set them through MOON_CPU_* variables. */
#include "moonlet/model.h"

#include <stddef.h>

static const char *const isa_choices[] = {"auto", "avx512", "avx2", "scalar", NULL};

#define TUNING_AT(_f) MOON_CONFIG_AT(moon_engine_tuning_t, _f)

/* Defaults, measured on Zen 5 with 2 threads (forward_cpu.c says where each
 * is used):
 * - par-min-macs 2^19: below, waking the workers costs more than the work
 *   (tiny models, e.g. stories260K).
 * - split-max-macs 2^22: split vs unsplit decode, largest step at batch
 *   4/8/32: stories260K 0.13M/0.26M/1.0M: +1/+59/+59 %; dim 128 1M/2.1M/8.4M:
 *   +8/+16/-3 %; dim 256 4.2M/8.4M/34M: -12/-1/-5 %; dim 512 from 17M: -4 to
 *   -26 %.
 * - op-min-b 4: below, the outer-product transpose would not pay.
 * - bt-min-b 29: below, the padded lanes cost more than the outer-product
 *   path's packing.
 * - qgemm-min-b 8: the integer GEMM unpacks each panel of weights once per
 *   matmul, which the batch must pay back. Q4_K_M 110M, 1 thread, decode
 *   tok/s against the one-row dots: b4 139-144 vs 206, b8 201-296 vs
 *   168-240, b32 405-523 vs 177-231, prefill 512 946 vs 389 (Q8_0 828 vs
 *   402). */
static const moon_config_field_t tuning_fields[] = {
    {"cpu-isa", MOON_CONFIG_ENUM, TUNING_AT(cpu_isa), .dflt = "auto",
     .doc     = "cpu kernels: the widest this cpu runs, or at most avx2, or scalar",
     .choices = isa_choices},
    {"cpu-par-min-macs", MOON_CONFIG_U64, TUNING_AT(cpu_par_min_macs), .dflt = "524288",
     .doc = "multiply-adds below which a step runs on the calling thread"},
    {"cpu-split-max-macs", MOON_CONFIG_U64, TUNING_AT(cpu_split_max_macs), .dflt = "4194304",
     .doc = "largest decode matmul below which the batch splits across threads"},
    {"cpu-op-min-b", MOON_CONFIG_U32, TUNING_AT(cpu_op_min_b), .dflt = "4",
     .doc = "batch from which avx-512 matmuls use the outer-product kernels", .min = 1},
    {"cpu-bt-min-b", MOON_CONFIG_U32, TUNING_AT(cpu_bt_min_b), .dflt = "29",
     .doc = "batch from which avx-512 matmuls put the batch in the lanes", .min = 1},
    {"cpu-bf16-dp", MOON_CONFIG_BOOL, TUNING_AT(cpu_bf16_dp), .dflt = "1",
     .doc = "bf16 products in batch-in-lanes steps where avx512_bf16 exists (0: exact f32)"},
    {"cpu-q8-act", MOON_CONFIG_BOOL, TUNING_AT(cpu_q8_act), .dflt = "1",
     .doc = "quantised weights times activations quantised to q8 (0: dequantised, f32)"},
    {"cpu-q8-max-b", MOON_CONFIG_U32, TUNING_AT(cpu_q8_max_b), .dflt = "32",
     .doc = "largest batch whose quantised matmuls use the q8 integer kernels where openblas is"},
    {"cpu-qgemm-min-b", MOON_CONFIG_U32, TUNING_AT(cpu_qgemm_min_b), .dflt = "8",
     .doc = "batch from which quantised matmuls use the integer gemm where avx-512 vnni is",
     .min = 1},
    {"cpu-nt", MOON_CONFIG_BOOL, TUNING_AT(cpu_nt), .dflt = "1",
     .doc = "batched matmuls through moonlet's nt kernels (0: through sgemm)"},
    {"cuda-graphs", MOON_CONFIG_BOOL, TUNING_AT(cuda_graphs), .dflt = "1",
     .doc = "cuda decode steps replayed as captured graphs"},
    MOON_CONFIG_END,
};

const moon_config_table_t moon_engine_tuning_table = {"engine", "model engine backends", "MOON_",
                                                      tuning_fields};

moon_status_t moon_engine_tuning_default(moon_engine_tuning_t *t)
{
    return t == NULL ? MOON_ERR_INVALID_PARAM : moon_config_from_env(&moon_engine_tuning_table, t);
}
