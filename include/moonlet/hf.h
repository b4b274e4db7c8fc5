/* moonlet/hf.h - Hugging Face checkpoints: the safetensors reader (JSON
 * header, mmap, F32/F16/BF16 tensors) and the converter of a checkpoint
 * folder (config.json, tokenizer.json, tokenizer_config.json, safetensors
 * shards) into GGUF with llama.cpp's names, keys and Q/K layout. Load-time
 * only; single-threaded; a reader is immutable after open. Malformed input
 * gets MOON_ERR_CORRUPT and an error log line naming the file and what is
 * wrong, never a crash or an out-of-bounds read. */
#ifndef MOONLET_HF_H
#define MOONLET_HF_H

#include "moonlet/defs.h"
#include "moonlet/gguf.h"
#include "moonlet/status.h"

#include <stddef.h>

/* Architectures (config.json "architectures") the converter reads. */
#define MOON_HF_ARCHS "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM"

typedef struct moon_st moon_st_t; /* opaque safetensors reader */

/* One tensor of a safetensors file. data points into the mapping. */
typedef struct {
    const char      *name; /* NUL-terminated, owned by the reader */
    moon_ggml_type_t type; /* F32, F16 or BF16 */
    uint32_t         n_dims;
    uint64_t         shape[MOON_GGUF_MAX_DIMS]; /* row-major: shape[n_dims - 1] contiguous */
    uint64_t         n_elems;
    uint64_t         bytes;
    const void      *data;
} moon_st_tensor_t;

/* Parses a safetensors image [data, data + bytes) (borrowed; must outlive
 * the reader). MOON_ERR_CORRUPT: truncated, bad header JSON, offsets out of
 * range or overlapping the header, shape and byte count that disagree;
 * MOON_ERR_UNSUPPORTED: a dtype other than F32/F16/BF16 (named in the log);
 * MOON_ERR_NO_MEMORY. what names the input in log lines (may be NULL). */
MOON_API moon_status_t moon_st_open_memory(const void *data, size_t bytes, const char *what,
                                           moon_st_t **st_p);
/* The same over a file (mmap, read-only). MOON_ERR_NOT_FOUND / MOON_ERR_IO
 * when it cannot be opened or mapped. */
MOON_API moon_status_t moon_st_open(const char *path, moon_st_t **st_p);
MOON_API void          moon_st_close(moon_st_t *st); /* NULL: no-op */

MOON_API uint64_t                moon_st_n_tensors(const moon_st_t *st);
MOON_API const moon_st_tensor_t *moon_st_tensor(const moon_st_t *st,
                                                uint64_t         idx); /* NULL: range */
MOON_API const moon_st_tensor_t *moon_st_find(const moon_st_t *st, const char *name);

/* Converts the checkpoint folder dir into a GGUF at out_path. type_name:
 * NULL or "" keeps each tensor's dtype (F32/F16/BF16); "F32", "F16" or
 * "BF16" converts the matrices; a quantized type or mix ("Q8_0", "Q4_K_M",
 * anything moon_model_quantize takes) converts and then quantizes. Norms,
 * biases and rope_freqs stay F32, as llama.cpp writes them.
 * MOON_ERR_NOT_FOUND: dir lacks config.json, tokenizer.json or weights;
 * MOON_ERR_UNSUPPORTED: an architecture outside MOON_HF_ARCHS (logged with
 * the list), a tokenizer other than a byte-level BPE or a SentencePiece-style
 * BPE (byte_fallback, with merges; Unigram is refused), a rope scaling other
 * than linear/llama3; MOON_ERR_CORRUPT: malformed JSON, safetensors, or
 * shapes that disagree with config.json; MOON_ERR_INVALID_PARAM: bad
 * type_name; MOON_ERR_IO. Nothing is left at out_path on failure. */
MOON_API moon_status_t moon_hf_convert(const char *dir, const char *out_path,
                                       const char *type_name);

/* The vocabulary alone: dir's tokenizer.json (+ tokenizer_config.json) as a
 * GGUF with no tensors (general.type vocab), the keys moon_hf_convert writes
 * (the C twin of model/convert/hf_tokenizer.mjs). Its statuses. */
MOON_API moon_status_t moon_hf_vocab_convert(const char *dir, const char *out_path);

/* 1 when path is a folder holding a config.json (a checkpoint to convert). */
MOON_API int moon_hf_is_checkpoint(const char *path);

/* The GGUF a server loads for checkpoint folder dir: dir/moonlet.gguf (the
 * checkpoint's own dtypes), converted when absent or older than any of
 * config.json, tokenizer.json, tokenizer_config.json, and reused otherwise.
 * The conversion writes a file of this process's own and renames it into
 * place, so ranks converting at once leave one whole file. path_p gets the
 * path (cap bytes). MOON_ERR_IO when dir is not writable (logged, with the
 * hint to run `moonlet convert --hf`); moon_hf_convert's statuses. */
MOON_API moon_status_t moon_hf_cached(const char *dir, char *path_p, size_t cap);

#endif /* MOONLET_HF_H */
