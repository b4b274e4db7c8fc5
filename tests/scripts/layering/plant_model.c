/* tests/scripts/layering/plant_model.c - built against moon_model only: its
 * own and moon_base's headers compile; with MOON_PLANT the runtime's header
 * must not be found (the layering test expects that build to fail). */
#include "moonlet/log.h"
#include "moonlet/model.h"
#ifdef MOON_PLANT
#include "moonlet/actor.h"
#endif

int moon_plant_model(void);
int moon_plant_model(void)
{
    return (int)sizeof(moon_model_config_t);
}
