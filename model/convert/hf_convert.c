/* model/convert/hf_convert.c - a Hugging Face checkpoint folder as GGUF:
 * config.json to ARCH.* keys, tokenizer.json to tokenizer.* keys
 * (hf_vocab.c), safetensors tensors to llama.cpp's names. Llama-family
 * q_proj/k_proj rows are permuted as llama.cpp's convert_hf_to_gguf.py does
 * (HF rotates the halves of each head, GGUF llama adjacent pairs); Qwen keeps
 * HF's layout (NeoX rotation). Matrices are borrowed from the shards' mmaps
 * when they need no change. */
#include "moonlet/hf.h"

#include "hf_vocab.h"
#include "moonlet/alloc.h"
#include "moonlet/log.h"
#include "moonlet/model.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HF_MAX_SHARDS 256
#define HF_MAX_JSON (256u << 20)

typedef struct {
    const char *hf;   /* config.json architectures[0] */
    const char *arch; /* general.architecture */
    int         permute_qk;
} hf_arch_t;

static const hf_arch_t hf_archs[] = {
    {"LlamaForCausalLM", "llama", 1},
    {"MistralForCausalLM", "llama", 1},
    {"Qwen2ForCausalLM", "qwen2", 0},
    {"Qwen3ForCausalLM", "qwen3", 0},
};

typedef struct {
    const hf_arch_t *arch;
    uint32_t         dim, hidden, n_layers, n_heads, n_kv_heads, head_dim, vocab, ctx;
    double           eps, theta;
    int              tied;
    const cJSON     *rope_scaling;
} hf_config_t;

typedef struct {
    moon_st_t  *shards[HF_MAX_SHARDS];
    uint32_t    n_shards;
    const char *shard_names[HF_MAX_SHARDS]; /* borrowed from the index JSON while it lives */
    void      **owned;                      /* converted tensor buffers, freed after the write */
    uint32_t    n_owned, cap_owned;
} hf_state_t;

/* dir/name into buf; 0 when it does not fit. */
static int join(char *buf, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    return n > 0 && (size_t)n < cap;
}

/* Parses the JSON file dir/name. MOON_ERR_NOT_FOUND when absent (logged only
 * when required). */
static moon_status_t read_json(const char *dir, const char *name, int required, cJSON **out_p)
{
    char   path[4096];
    FILE  *f;
    long   len;
    char  *buf;
    cJSON *root;

    if (!join(path, sizeof(path), dir, name)) {
        return MOON_ERR_INVALID_PARAM;
    }
    f = fopen(path, "rb");
    if (f == NULL) {
        if (required || errno != ENOENT) {
            MOON_ERROR("hf: %s: %s", path, strerror(errno));
        }
        return errno == ENOENT ? MOON_ERR_NOT_FOUND : MOON_ERR_IO;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || (unsigned long)len > HF_MAX_JSON ||
        fseek(f, 0, SEEK_SET) != 0) {
        MOON_ERROR("hf: %s: cannot size it (or over %u MiB)", path, HF_MAX_JSON >> 20);
        fclose(f);
        return MOON_ERR_IO;
    }
    buf = moon_malloc((size_t)len + 1);
    if (buf == NULL) {
        fclose(f);
        return MOON_ERR_NO_MEMORY;
    }
    if (fread(buf, 1, (size_t)len, f) != (size_t)len) {
        MOON_ERROR("hf: %s: short read", path);
        moon_free(buf);
        fclose(f);
        return MOON_ERR_IO;
    }
    fclose(f);
    root = cJSON_ParseWithLength(buf, (size_t)len);
    moon_free(buf);
    if (root == NULL) {
        MOON_ERROR("hf: %s: not valid JSON", path);
        return MOON_ERR_CORRUPT;
    }
    *out_p = root;
    return MOON_OK;
}

static int cfg_u32(const cJSON *c, const char *key, uint32_t dflt, uint32_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);

    if (v == NULL || cJSON_IsNull(v)) {
        *out = dflt;
        return dflt != 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > (double)(1u << 30) ||
        v->valuedouble != (double)(uint32_t)v->valuedouble) {
        return 0;
    }
    *out = (uint32_t)v->valuedouble;
    return 1;
}

static double cfg_f64(const cJSON *c, const char *key, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static moon_status_t parse_config(const cJSON *c, hf_config_t *h)
{
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(c, "architectures");
    const cJSON *a     = cJSON_GetArrayItem(archs, 0);

    memset(h, 0, sizeof(*h));
    if (!cJSON_IsString(a)) {
        MOON_ERROR("hf: config.json has no architectures (supported: " MOON_HF_ARCHS ")");
        return MOON_ERR_UNSUPPORTED;
    }
    for (size_t i = 0; i < sizeof(hf_archs) / sizeof(hf_archs[0]); i++) {
        if (strcmp(a->valuestring, hf_archs[i].hf) == 0) {
            h->arch = &hf_archs[i];
        }
    }
    if (h->arch == NULL) {
        MOON_ERROR("hf: architecture '%s' unsupported (supported: " MOON_HF_ARCHS ")",
                   a->valuestring);
        return MOON_ERR_UNSUPPORTED;
    }
    if (!cfg_u32(c, "hidden_size", 0, &h->dim) ||
        !cfg_u32(c, "num_hidden_layers", 0, &h->n_layers) ||
        !cfg_u32(c, "num_attention_heads", 0, &h->n_heads) ||
        !cfg_u32(c, "intermediate_size", 0, &h->hidden) ||
        !cfg_u32(c, "vocab_size", 0, &h->vocab) ||
        !cfg_u32(c, "num_key_value_heads", h->n_heads, &h->n_kv_heads) ||
        !cfg_u32(c, "head_dim", h->dim / h->n_heads, &h->head_dim) ||
        !cfg_u32(c, "max_position_embeddings", 2048, &h->ctx) || h->n_heads % h->n_kv_heads != 0 ||
        h->head_dim % 2 != 0) {
        MOON_ERROR("hf: config.json: hidden_size, num_hidden_layers, num_attention_heads, "
                   "num_key_value_heads, intermediate_size, vocab_size or head_dim missing or "
                   "inconsistent");
        return MOON_ERR_CORRUPT;
    }
    h->eps          = cfg_f64(c, "rms_norm_eps", 1e-6);
    h->theta        = cfg_f64(c, "rope_theta", 10000.0);
    h->tied         = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "tie_word_embeddings"));
    h->rope_scaling = cJSON_GetObjectItemCaseSensitive(c, "rope_scaling");
    if (cJSON_IsNull(h->rope_scaling)) {
        h->rope_scaling = NULL;
    }
    return MOON_OK;
}

/* "rope_type" (or the older "type") of rope_scaling; NULL when none. */
static const char *rope_type(const cJSON *rs)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");

    t = cJSON_IsString(t) ? t : cJSON_GetObjectItemCaseSensitive(rs, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

static moon_status_t write_keys(moon_gguf_writer_t *w, const hf_config_t *h, const char *name,
                                uint32_t n_tokens, uint32_t file_type)
{
    moon_status_t status = MOON_OK;
    const char   *arch   = h->arch->arch;
    const char   *rt     = rope_type(h->rope_scaling);
    char          key[96];

#define PUT(_call)                                                                                 \
    do {                                                                                           \
        if (status == MOON_OK) {                                                                   \
            status = (_call);                                                                      \
        }                                                                                          \
    } while (0)
#define PUT_ARCH(_fn, _suffix, _v)                                                                 \
    do {                                                                                           \
        snprintf(key, sizeof(key), "%s.%s", arch, (_suffix));                                      \
        PUT(_fn(w, key, (_v)));                                                                    \
    } while (0)
    PUT(moon_gguf_writer_kv_str(w, "general.architecture", arch));
    PUT(moon_gguf_writer_kv_str(w, "general.name", name));
    PUT(moon_gguf_writer_kv_u32(w, "general.file_type", file_type));
    PUT(moon_gguf_writer_kv_u32(w, "general.alignment", MOON_GGUF_DEFAULT_ALIGNMENT));
    PUT_ARCH(moon_gguf_writer_kv_u32, "vocab_size", n_tokens);
    PUT_ARCH(moon_gguf_writer_kv_u32, "context_length", h->ctx);
    PUT_ARCH(moon_gguf_writer_kv_u32, "embedding_length", h->dim);
    PUT_ARCH(moon_gguf_writer_kv_u32, "block_count", h->n_layers);
    PUT_ARCH(moon_gguf_writer_kv_u32, "feed_forward_length", h->hidden);
    PUT_ARCH(moon_gguf_writer_kv_u32, "rope.dimension_count", h->head_dim);
    PUT_ARCH(moon_gguf_writer_kv_f32, "rope.freq_base", (float)h->theta);
    PUT_ARCH(moon_gguf_writer_kv_u32, "attention.head_count", h->n_heads);
    PUT_ARCH(moon_gguf_writer_kv_u32, "attention.head_count_kv", h->n_kv_heads);
    PUT_ARCH(moon_gguf_writer_kv_f32, "attention.layer_norm_rms_epsilon", (float)h->eps);
    if (h->head_dim != h->dim / h->n_heads) {
        PUT_ARCH(moon_gguf_writer_kv_u32, "attention.key_length", h->head_dim);
        PUT_ARCH(moon_gguf_writer_kv_u32, "attention.value_length", h->head_dim);
    }
    if (rt != NULL && strcmp(rt, "linear") == 0) {
        PUT_ARCH(moon_gguf_writer_kv_str, "rope.scaling.type", "linear");
        PUT_ARCH(moon_gguf_writer_kv_f32, "rope.scaling.factor",
                 (float)cfg_f64(h->rope_scaling, "factor", 1.0));
    }
#undef PUT_ARCH
#undef PUT
    return status;
}

/* Llama 3.1's frequency factors from rope_scaling (as llama.cpp's converter). */
static void llama3_rope_factors(const hf_config_t *h, float *out)
{
    double factor = cfg_f64(h->rope_scaling, "factor", 8.0);
    double low    = cfg_f64(h->rope_scaling, "low_freq_factor", 1.0);
    double high   = cfg_f64(h->rope_scaling, "high_freq_factor", 4.0);
    double old    = cfg_f64(h->rope_scaling, "original_max_position_embeddings", 8192.0);

    for (uint32_t j = 0; j < h->head_dim / 2; j++) {
        double freq    = 1.0 / pow(h->theta, (double)(2 * j) / (double)h->head_dim);
        double wavelen = 2.0 * 3.14159265358979323846 / freq;
        if (wavelen < old / high) {
            out[j] = 1.0f;
        } else if (wavelen > old / low) {
            out[j] = (float)factor;
        } else {
            double smooth = (old / wavelen - low) / (high - low);
            out[j]        = (float)(1.0 / ((1.0 - smooth) / factor + smooth));
        }
    }
}

static moon_status_t open_shards(const char *dir, hf_state_t *s)
{
    char          path[4096];
    cJSON        *index  = NULL;
    moon_status_t status = read_json(dir, "model.safetensors.index.json", 0, &index);
    const cJSON  *e;

    if (status == MOON_ERR_NOT_FOUND) {
        if (!join(path, sizeof(path), dir, "model.safetensors")) {
            return MOON_ERR_INVALID_PARAM;
        }
        status      = moon_st_open(path, &s->shards[0]);
        s->n_shards = status == MOON_OK;
        return status;
    }
    if (status != MOON_OK) {
        return status;
    }
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(index, "weight_map"))
    {
        uint32_t i = 0;
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') != NULL) {
            MOON_ERROR("hf: model.safetensors.index.json: bad shard for '%s'", e->string);
            status = MOON_ERR_CORRUPT;
            break;
        }
        while (i < s->n_shards && strcmp(s->shard_names[i], e->valuestring) != 0) {
            i++;
        }
        if (i < s->n_shards) {
            continue;
        }
        if (s->n_shards == HF_MAX_SHARDS || !join(path, sizeof(path), dir, e->valuestring)) {
            MOON_ERROR("hf: %s: too many shards or too long a path", dir);
            status = MOON_ERR_INVALID_PARAM;
            break;
        }
        s->shard_names[i] = e->valuestring;
        status            = moon_st_open(path, &s->shards[i]);
        if (status != MOON_OK) {
            break;
        }
        s->n_shards++;
    }
    cJSON_Delete(index);
    if (status == MOON_OK && s->n_shards == 0) {
        MOON_ERROR("hf: %s: model.safetensors.index.json names no shard", dir);
        status = MOON_ERR_NOT_FOUND;
    }
    return status;
}

static const moon_st_tensor_t *find_tensor(const hf_state_t *s, const char *name)
{
    for (uint32_t i = 0; i < s->n_shards; i++) {
        const moon_st_tensor_t *t = moon_st_find(s->shards[i], name);
        if (t != NULL) {
            return t;
        }
    }
    return NULL;
}

static void *own(hf_state_t *s, size_t bytes)
{
    void *p;

    if (s->n_owned == s->cap_owned) {
        uint32_t cap = s->cap_owned ? 2 * s->cap_owned : 64;
        void   **o   = moon_realloc(s->owned, cap * sizeof(*o));
        if (o == NULL) {
            return NULL;
        }
        s->owned     = o;
        s->cap_owned = cap;
    }
    p = moon_malloc(bytes != 0 ? bytes : 1);
    if (p != NULL) {
        s->owned[s->n_owned++] = p;
    }
    return p;
}

/* Element i of a F32/F16/BF16 array as float. */
static float elem(moon_ggml_type_t type, const void *data, uint64_t i)
{
    uint16_t h;
    float    f;

    if (type == MOON_GGML_F32) {
        memcpy(&f, (const uint8_t *)data + 4 * i, 4);
        return f;
    }
    memcpy(&h, (const uint8_t *)data + 2 * i, 2);
    return type == MOON_GGML_F16 ? moon_fp16_to_f32(h) : moon_bf16_to_f32(h);
}

typedef struct {
    const char *gguf; /* printf pattern with the layer */
    const char *hf;
    int         kind; /* 0 matrix, 1 vector (F32), 2 q rows, 3 k rows (permuted for llama) */
    int         need; /* 1 required, 0 optional */
} hf_map_t;

/* Adds one tensor: src converted to type (rows permuted when perm_heads > 0). */
static moon_status_t add_tensor(moon_gguf_writer_t *w, hf_state_t *s, const char *name,
                                const moon_st_tensor_t *t, moon_ggml_type_t type,
                                uint32_t perm_heads)
{
    uint64_t ne[MOON_GGUF_MAX_DIMS];
    uint64_t rows = t->n_dims >= 1 ? t->shape[0] : 1;
    uint64_t cols = t->n_elems / (rows ? rows : 1);
    void    *dst;

    for (uint32_t d = 0; d < t->n_dims; d++) {
        ne[d] = t->shape[t->n_dims - 1 - d];
    }
    if (type == t->type && perm_heads == 0) {
        return moon_gguf_writer_tensor(w, name, type, t->n_dims, ne, t->data);
    }
    dst = own(s, moon_ggml_type_bytes(type, t->n_elems));
    if (dst == NULL) {
        return MOON_ERR_NO_MEMORY;
    }
    for (uint64_t r = 0; r < rows; r++) {
        /* GGUF row r = head h, pair k, half j comes from HF row h*hd + j*hd/2 + k */
        uint64_t src_r = r;
        if (perm_heads > 0) {
            uint64_t hd = rows / perm_heads, h = r / hd, k = (r % hd) / 2, j = r % 2;
            src_r = h * hd + j * (hd / 2) + k;
        }
        uint64_t es = moon_ggml_type_bytes(type, 1);
        if (type == t->type) {
            memcpy((uint8_t *)dst + r * cols * es, (const uint8_t *)t->data + src_r * cols * es,
                   cols * es);
            continue;
        }
        for (uint64_t c = 0; c < cols; c++) {
            float    f = elem(t->type, t->data, src_r * cols + c);
            uint8_t *o = (uint8_t *)dst + (r * cols + c) * es;
            if (type == MOON_GGML_F32) {
                memcpy(o, &f, 4);
            } else {
                uint16_t h = type == MOON_GGML_F16 ? moon_f32_to_fp16(f) : moon_f32_to_bf16(f);
                memcpy(o, &h, 2);
            }
        }
    }
    return moon_gguf_writer_tensor(w, name, type, t->n_dims, ne, dst);
}

static moon_status_t add_tensors(moon_gguf_writer_t *w, hf_state_t *s, const hf_config_t *h,
                                 int keep, moon_ggml_type_t mat_type)
{
    static const hf_map_t layer[] = {
        {"blk.%u.attn_norm.weight", "model.layers.%u.input_layernorm.weight", 1, 1},
        {"blk.%u.attn_q.weight", "model.layers.%u.self_attn.q_proj.weight", 2, 1},
        {"blk.%u.attn_k.weight", "model.layers.%u.self_attn.k_proj.weight", 3, 1},
        {"blk.%u.attn_v.weight", "model.layers.%u.self_attn.v_proj.weight", 0, 1},
        {"blk.%u.attn_q.bias", "model.layers.%u.self_attn.q_proj.bias", 1, 0},
        {"blk.%u.attn_k.bias", "model.layers.%u.self_attn.k_proj.bias", 1, 0},
        {"blk.%u.attn_v.bias", "model.layers.%u.self_attn.v_proj.bias", 1, 0},
        {"blk.%u.attn_q_norm.weight", "model.layers.%u.self_attn.q_norm.weight", 1, 0},
        {"blk.%u.attn_k_norm.weight", "model.layers.%u.self_attn.k_norm.weight", 1, 0},
        {"blk.%u.attn_output.weight", "model.layers.%u.self_attn.o_proj.weight", 0, 1},
        {"blk.%u.ffn_norm.weight", "model.layers.%u.post_attention_layernorm.weight", 1, 1},
        {"blk.%u.ffn_gate.weight", "model.layers.%u.mlp.gate_proj.weight", 0, 1},
        {"blk.%u.ffn_down.weight", "model.layers.%u.mlp.down_proj.weight", 0, 1},
        {"blk.%u.ffn_up.weight", "model.layers.%u.mlp.up_proj.weight", 0, 1},
    };
    moon_status_t           status = MOON_OK;
    const moon_st_tensor_t *t;
    char                    gname[96], hname[128];
    uint32_t                n_mapped = 0, n_hf = 0;

    for (int64_t l = -1; l <= (int64_t)h->n_layers && status == MOON_OK; l++) {
        const hf_map_t *maps  = layer;
        size_t          n     = sizeof(layer) / sizeof(layer[0]);
        const hf_map_t  top[] = {{"token_embd.weight", "model.embed_tokens.weight", 0, 1}};
        const hf_map_t  end[] = {{"output_norm.weight", "model.norm.weight", 1, 1},
                                 {"output.weight", "lm_head.weight", 0, !h->tied}};
        if (l < 0 || l == (int64_t)h->n_layers) {
            maps = l < 0 ? top : end;
            n    = l < 0 ? 1 : (h->tied ? 1 : 2);
        }
        for (size_t i = 0; i < n && status == MOON_OK; i++) {
            moon_ggml_type_t type;
            uint32_t         perm = 0;
            snprintf(gname, sizeof(gname), maps[i].gguf, (unsigned)l);
            snprintf(hname, sizeof(hname), maps[i].hf, (unsigned)l);
            t = find_tensor(s, hname);
            if (t == NULL) {
                if (maps[i].need) {
                    MOON_ERROR("hf: tensor '%s' missing from the safetensors", hname);
                    status = MOON_ERR_CORRUPT;
                }
                continue;
            }
            type = maps[i].kind == 1 ? MOON_GGML_F32 : keep ? t->type : mat_type;
            if (h->arch->permute_qk && (maps[i].kind == 2 || maps[i].kind == 3)) {
                perm = maps[i].kind == 2 ? h->n_heads : h->n_kv_heads;
            }
            if (perm != 0 && (t->n_dims != 2 || t->shape[0] != (uint64_t)perm * h->head_dim)) {
                MOON_ERROR("hf: tensor '%s' is not %u x head_dim %u rows", hname, perm,
                           h->head_dim);
                status = MOON_ERR_CORRUPT;
                break;
            }
            status = add_tensor(w, s, gname, t, type, perm);
            n_mapped++;
        }
    }
    if (status == MOON_OK && h->rope_scaling != NULL) {
        const char *rt = rope_type(h->rope_scaling);
        if (rt != NULL && strcmp(rt, "llama3") == 0) {
            float   *f  = own(s, h->head_dim / 2 * sizeof(float));
            uint64_t ne = h->head_dim / 2;
            if (f == NULL) {
                return MOON_ERR_NO_MEMORY;
            }
            llama3_rope_factors(h, f);
            status = moon_gguf_writer_tensor(w, "rope_freqs.weight", MOON_GGML_F32, 1, &ne, f);
        } else if (rt == NULL || (strcmp(rt, "linear") != 0 && strcmp(rt, "default") != 0)) {
            MOON_ERROR("hf: rope_scaling type '%s' unsupported (supported: linear, llama3)",
                       rt ? rt : "?");
            status = MOON_ERR_UNSUPPORTED;
        }
    }
    for (uint32_t i = 0; i < s->n_shards; i++) {
        for (uint64_t j = 0; j < moon_st_n_tensors(s->shards[i]); j++) {
            const char *nm = moon_st_tensor(s->shards[i], j)->name;
            n_hf += strstr(nm, "rotary_emb.inv_freq") == NULL &&
                    !(h->tied && strcmp(nm, "lm_head.weight") == 0);
        }
    }
    if (status == MOON_OK && n_hf != n_mapped) {
        MOON_WARN("hf: %u of the checkpoint's %u tensors have no GGUF name (skipped)",
                  n_hf - n_mapped, n_hf);
    }
    return status;
}

static moon_status_t parse_type(const char *type_name, int *keep_p, moon_ggml_type_t *mat_p,
                                int *quant_p)
{
    *keep_p  = type_name == NULL || type_name[0] == '\0';
    *quant_p = 0;
    *mat_p   = MOON_GGML_F32;
    if (*keep_p) {
        return MOON_OK;
    }
    if (strcasecmp(type_name, "F32") == 0) {
        *mat_p = MOON_GGML_F32;
    } else if (strcasecmp(type_name, "F16") == 0) {
        *mat_p = MOON_GGML_F16;
    } else if (strcasecmp(type_name, "BF16") == 0) {
        *mat_p = MOON_GGML_BF16;
    } else {
        *keep_p  = 1; /* the source types, then moon_model_quantize */
        *quant_p = 1;
    }
    return MOON_OK;
}

static const char *base_name(const char *dir)
{
    size_t      n = strlen(dir);
    const char *p;

    while (n > 1 && dir[n - 1] == '/') {
        n--;
    }
    for (p = dir + n; p > dir && p[-1] != '/'; p--) {
    }
    return p;
}

moon_status_t moon_hf_convert(const char *dir, const char *out_path, const char *type_name)
{
    cJSON              *cfg = NULL, *tj = NULL, *tc = NULL;
    hf_config_t         h;
    hf_state_t          s = {0};
    moon_gguf_writer_t *w = NULL;
    moon_ggml_type_t    mat;
    int                 keep, quant;
    uint32_t            n_tokens = 0, file_type = 0;
    char                tmp[4096], name[256];
    moon_status_t       status;

    if (dir == NULL || out_path == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    status = parse_type(type_name, &keep, &mat, &quant);
    if (status == MOON_OK) {
        status = read_json(dir, "config.json", 1, &cfg);
    }
    if (status == MOON_OK) {
        status = parse_config(cfg, &h);
    }
    if (status == MOON_OK) {
        status = read_json(dir, "tokenizer.json", 1, &tj);
    }
    if (status == MOON_OK) {
        status = read_json(dir, "tokenizer_config.json", 0, &tc);
        status = status == MOON_ERR_NOT_FOUND ? MOON_OK : status;
    }
    if (status == MOON_OK) {
        status = open_shards(dir, &s);
    }
    if (status == MOON_OK) {
        status = moon_gguf_writer_create(&w);
    }
    if (status == MOON_OK) {
        /* llama.cpp's file_type of the matrices' type: 0 F32, 1 F16, 32 BF16 */
        const moon_st_tensor_t *e = find_tensor(&s, "model.embed_tokens.weight");
        moon_ggml_type_t        t = keep && e != NULL ? e->type : mat;
        file_type                 = t == MOON_GGML_F16 ? 1 : t == MOON_GGML_BF16 ? 32 : 0;
    }
    snprintf(name, sizeof(name), "%s", base_name(dir));
    if (status == MOON_OK) {
        status = moon_hf_vocab_write(tj, tc, h.vocab, w, &n_tokens);
    }
    if (status == MOON_OK) {
        status = write_keys(w, &h, name, n_tokens, file_type);
    }
    if (status == MOON_OK) {
        status = add_tensors(w, &s, &h, keep, mat);
    }
    if (status == MOON_OK && quant) {
        if (snprintf(tmp, sizeof(tmp), "%s.f.tmp", out_path) >= (int)sizeof(tmp)) {
            status = MOON_ERR_INVALID_PARAM;
        } else {
            status = moon_gguf_writer_write(w, tmp);
        }
        if (status == MOON_OK) {
            status = moon_model_quantize(tmp, out_path, type_name);
            unlink(tmp);
        }
    } else if (status == MOON_OK) {
        status = moon_gguf_writer_write(w, out_path);
    }
    moon_gguf_writer_destroy(w);
    for (uint32_t i = 0; i < s.n_owned; i++) {
        moon_free(s.owned[i]);
    }
    moon_free(s.owned);
    for (uint32_t i = 0; i < s.n_shards; i++) {
        moon_st_close(s.shards[i]);
    }
    cJSON_Delete(cfg);
    cJSON_Delete(tj);
    cJSON_Delete(tc);
    if (status == MOON_OK) {
        MOON_INFO("hf: %s -> %s (%s, %u tokens)", dir, out_path, h.arch->arch, n_tokens);
    }
    return status;
}

moon_status_t moon_hf_vocab_convert(const char *dir, const char *out_path)
{
    cJSON              *tj = NULL, *tc = NULL;
    moon_gguf_writer_t *w        = NULL;
    uint32_t            n_tokens = 0;
    moon_status_t       status;

    if (dir == NULL || out_path == NULL) {
        return MOON_ERR_INVALID_PARAM;
    }
    status = read_json(dir, "tokenizer.json", 1, &tj);
    if (status == MOON_OK) {
        status = read_json(dir, "tokenizer_config.json", 0, &tc);
        status = status == MOON_ERR_NOT_FOUND ? MOON_OK : status;
    }
    if (status == MOON_OK) {
        status = moon_gguf_writer_create(&w);
    }
    if (status == MOON_OK) {
        status = moon_gguf_writer_kv_str(w, "general.architecture", "llama");
    }
    if (status == MOON_OK) {
        status = moon_gguf_writer_kv_str(w, "general.type", "vocab");
    }
    if (status == MOON_OK) {
        status = moon_hf_vocab_write(tj, tc, 0, w, &n_tokens);
    }
    if (status == MOON_OK) {
        status = moon_gguf_writer_write(w, out_path);
    }
    moon_gguf_writer_destroy(w);
    cJSON_Delete(tj);
    cJSON_Delete(tc);
    return status;
}

int moon_hf_is_checkpoint(const char *path)
{
    struct stat sb;
    char        p[4096];

    return path != NULL && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) &&
           join(p, sizeof(p), path, "config.json") && stat(p, &sb) == 0;
}

static int mtime_after(struct timespec a, struct timespec b)
{
    return a.tv_sec > b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec > b.tv_nsec);
}

/* The newest modification time of dir's checkpoint files ({0, 0}: none). */
static struct timespec newest_input(const char *dir)
{
    static const char *const names[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                        "model.safetensors", "model.safetensors.index.json"};
    struct timespec          t       = {0, 0};
    char                     p[4096];
    struct stat              sb;

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (join(p, sizeof(p), dir, names[i]) && stat(p, &sb) == 0 && mtime_after(sb.st_mtim, t)) {
            t = sb.st_mtim;
        }
    }
    return t;
}

moon_status_t moon_hf_cached(const char *dir, char *path_p, size_t cap)
{
    char          tmp[4096];
    struct stat   sb;
    moon_status_t status;

    if (dir == NULL || path_p == NULL || !join(path_p, cap, dir, "moonlet.gguf") ||
        snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path_p, (long)getpid()) >= (int)sizeof(tmp)) {
        return MOON_ERR_INVALID_PARAM;
    }
    /* strictly newer, to the nanosecond: a checkpoint edited in the second
     * (or the clock tick) of an earlier conversion, or copied together with
     * its converted file and then edited, is converted again */
    if (stat(path_p, &sb) == 0 && mtime_after(sb.st_mtim, newest_input(dir))) {
        MOON_INFO("hf: %s: reusing %s", dir, path_p);
        return MOON_OK;
    }
    status = moon_hf_convert(dir, tmp, NULL);
    if (status == MOON_ERR_IO) {
        MOON_ERROR("hf: %s is not writable for its converted copy: run `moonlet convert --hf %s "
                   "--out M.gguf` and serve M.gguf",
                   dir, dir);
    }
    if (status == MOON_OK && rename(tmp, path_p) != 0) {
        MOON_ERROR("hf: rename %s: %s", tmp, strerror(errno));
        unlink(tmp);
        status = MOON_ERR_IO;
    }
    return status;
}
