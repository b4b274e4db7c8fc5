/* tests/scripts/layering/plant_kvstore.c - built against moon_kvstore only:
 * with MOON_PLANT the model's header must not be found. */
#include "moonlet/kv_shard.h"
#ifdef MOON_PLANT
#include "moonlet/model.h"
#endif

int moon_plant_kvstore(void);
int moon_plant_kvstore(void)
{
    return (int)sizeof(moon_kv_key_t);
}
