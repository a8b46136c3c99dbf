"""The offscreen cases of the shipped eval suites: what each Ori of the village (scripts/eval_suite_world.py)
remembers of a day, to reflect on (Lachesis) or to tell as a story (Atropos)."""

from __future__ import annotations

from eval_suite_world import Scene, m

REFLECTION = (
    Scene(
        "smith-bellows",
        "After patching the bellows with a friend's leather.",
        "ori:adaeze",
        (
            m("mem:adaeze:9", "The forge bellows split last week; Bram lent leather to patch them."),
            m("mem:adaeze:10", "Finished three hinges with the patched bellows before noon."),
        ),
        ("Bram", "bellows", "leather"),
    ),
    Scene(
        "smith-rival-gears",
        "The rival paid in full.",
        "ori:adaeze",
        (
            m("mem:adaeze:30", "Oswin paid for the mill gears in full, though late."),
            m("mem:adaeze:31", "Oswin nodded at the smithy door, which he never does."),
        ),
        ("Oswin", "paid", "gears"),
    ),
    Scene(
        "smith-late-iron",
        "The iron cart came late and prices rose.",
        "ori:adaeze",
        (
            m("mem:adaeze:21", "Set the price of a sickle at four silver after the iron cart came late."),
            m("mem:adaeze:22", "Rowan walked off without buying when he heard the price."),
        ),
        ("price", "iron", "silver"),
    ),
    Scene(
        "baker-feast",
        "The inn's feast order strained the ovens.",
        "ori:bram",
        (
            m("mem:bram:2", "Maren ordered twelve loaves for the inn's feast."),
            m("mem:bram:3", "Burnt the last four loaves and baked them again at midnight."),
        ),
        ("feast", "loaves", "burnt", "oven"),
    ),
    Scene(
        "baker-children",
        "Children came for bread.",
        "ori:bram",
        (
            m(
                "mem:bram:11",
                "Gave Bisi the heel of the barley loaf yesterday; she laughed all the way home.",
            ),
            m("mem:bram:12", "Three more children came to the window this morning."),
        ),
        ("children", "heel", "bread"),
    ),
    Scene(
        "baker-flour",
        "Flour ran low.",
        "ori:bram",
        (
            m("mem:bram:7", "Flour is low until Oswin's cart arrives on market day."),
            m("mem:bram:8", "Baked smaller loaves to make the flour last."),
        ),
        ("flour", "smaller", "market"),
    ),
    Scene(
        "herbalist-fever",
        "A remedy worked.",
        "ori:kemi",
        (
            m("mem:kemi:3", "Willow bark tea broke the miller's fever in two days."),
            m("mem:kemi:4", "Oswin sent a sack of flour as thanks."),
        ),
        ("willow", "fever", "thanks"),
    ),
    Scene(
        "herbalist-foxglove",
        "The goat and the foxglove.",
        "ori:kemi",
        (
            m("mem:kemi:8", "Locked the foxglove away after the goat ate some and sickened."),
            m("mem:kemi:9", "Rowan asked about foxglove twice this week."),
        ),
        ("foxglove", "locked", "careful"),
    ),
    Scene(
        "herbalist-cousin",
        "Her cousin's long nights.",
        "ori:kemi",
        (
            m("mem:kemi:12", "Idris sleeps until the evening bell after his night on the wall."),
            m("mem:kemi:13", "Left a pouch of chamomile at the gatehouse for Idris."),
        ),
        ("Idris", "chamomile", "sleep"),
    ),
    Scene(
        "ferry-storm",
        "La tormenta y el remo roto.",
        "ori:tomas",
        (
            m("mem:tomas:9", "La última tormenta partió un remo y casi volcamos junto a la roca."),
            m("mem:tomas:10", "Rowan ofreció el doble por cruzar y le dije que no."),
        ),
        ("tormenta", "remo", "roca"),
    ),
    Scene(
        "ferry-sister",
        "La boda y la tela azul.",
        "ori:tomas",
        (
            m("mem:tomas:2", "Lucía terminó la tela azul para la boda del molinero."),
            m("mem:tomas:3", "Crucé a los invitados de la boda en tres viajes."),
        ),
        ("boda", "Lucía", "viajes"),
    ),
    Scene(
        "loom-order",
        "Un encargo grande.",
        "ori:lucia",
        (
            m("mem:lucia:6", "Un paño de lana fina lleva tres días en el telar."),
            m("mem:lucia:7", "Inés encargó dos paños para el invierno."),
        ),
        ("telar", "lana", "invierno"),
    ),
    Scene(
        "loom-trade",
        "Comercio con la vendedora del mercado.",
        "ori:lucia",
        (
            m("mem:lucia:12", "Yétúndé cambió ñame por la tela amarilla."),
            m("mem:lucia:10", "Llamé Santa Clara a la tela amarilla del mercado."),
        ),
        ("Yétúndé", "ñame", "Santa Clara"),
    ),
    Scene(
        "hunter-moon",
        "Òṣùpá àti ọdẹ.",
        "ori:femi",
        (
            m("mem:femi:3", "Òṣùpá kún lánàá; mi ò ní ṣọdẹ lónìí."),
            m("mem:femi:4", "Mo tún ọfà mi ṣe dípò rẹ̀."),
        ),
        ("osupa", "ofa"),
    ),
    Scene(
        "hunter-leopard",
        "Ẹkùn lẹ́bàá odò.",
        "ori:femi",
        (
            m("mem:femi:7", "Mo rí ipa ẹsẹ̀ ẹkùn ní ẹ̀gbẹ́ odò ní àárọ̀ yìí."),
            m("mem:femi:8", "Mo sọ fún Idris kí ó ṣọ́ ẹnu ibodè dáadáa."),
        ),
        ("ekun", "odo", "Idris"),
    ),
    Scene(
        "market-yams",
        "Iṣu ní ọjà.",
        "ori:yetunde",
        (
            m("mem:yetunde:4", "Mo ta iṣu márùn-ún ní ọgọ́rùn-ún naira lánàá."),
            m("mem:yetunde:5", "Oníbàárà kan sọ pé iṣu mi wọ́n jù."),
        ),
        ("isu", "naira"),
    ),
    Scene(
        "market-brother",
        "Ẹ̀gbọ́n rẹ̀ àti ẹran ìgbẹ́.",
        "ori:yetunde",
        (
            m("mem:yetunde:9", "Fẹ́mi mú ẹran ìgbẹ́ wá sí ọjà ní ọjọ́ Ẹtì."),
            m("mem:yetunde:10", "Mo ta gbogbo ẹran náà kí ọjà tó parí."),
        ),
        ("Femi", "Fẹ́mi", "eran"),
    ),
    Scene(
        "mill-storm",
        "The storm jammed the millrace.",
        "ori:oswin",
        (
            m("mem:oswin:12", "The millrace jammed with branches after the storm; two days lost."),
            m("mem:oswin:13", "Bram came twice asking for flour."),
        ),
        ("millrace", "storm", "Bram"),
    ),
    Scene(
        "mill-debt",
        "Debts in the ledger.",
        "ori:oswin",
        (
            m("mem:oswin:3", "Maren still owes six sacks' worth from the harvest feast."),
            m("mem:oswin:4", "Wrote the debt in red in the ledger."),
        ),
        ("debt", "ledger", "Maren"),
    ),
    Scene(
        "inn-full",
        "A full house.",
        "ori:maren",
        (
            m("mem:maren:8", "Only the small room under the eaves is free tonight."),
            m("mem:maren:9", "Turned away two pilgrims at dusk."),
        ),
        ("pilgrims", "room", "full"),
    ),
    Scene(
        "inn-cider",
        "Remembering drinks.",
        "ori:maren",
        (
            m("mem:maren:2", "The tall traveller with the green cloak always takes pear cider."),
            m("mem:maren:3", "Forgot the traveller's name again and called him 'Green Cloak'."),
        ),
        ("cider", "name", "cloak"),
    ),
    Scene(
        "watch-lantern",
        "A lantern on the wall.",
        "ori:idris",
        (
            m(
                "mem:idris:11",
                "Saw a lantern moving along the east wall at midnight; it vanished by the well.",
            ),
            m("mem:idris:12", "Found fresh footprints by the well at dawn."),
        ),
        ("lantern", "well", "footprints"),
    ),
    Scene(
        "watch-curfew",
        "Keeping the curfew.",
        "ori:idris",
        (
            m("mem:idris:5", "The council ordered the gate shut from the night bell to dawn."),
            m("mem:idris:6", "Tunde begged to come in late; I kept the gate shut."),
        ),
        ("gate", "council", "curfew"),
    ),
    Scene(
        "watch-chamomile",
        "A gift from his cousin.",
        "ori:idris",
        (
            m("mem:idris:14", "Kemi left chamomile at the gatehouse; slept well for once."),
            m("mem:idris:15", "The night was quiet from the night bell to dawn."),
        ),
        ("Kemi", "chamomile", "slept", "quiet"),
    ),
)

SUMMARY = (
    Scene(
        "smith-day-hinges",
        "A working day at the smithy.",
        "ori:adaeze",
        (
            m("mem:adaeze:10", "Finished three hinges with the patched bellows before noon."),
            m("mem:adaeze:14", "Promised Tunde the plough blade by the third bell tomorrow."),
            m("mem:adaeze:15", "Shared bread and news with Bram at dusk."),
        ),
        ("hinges", "plough", "Bram"),
        arc="arc:smithy-debts",
    ),
    Scene(
        "smith-day-market",
        "Market day at the smithy.",
        "ori:adaeze",
        (
            m("mem:adaeze:22", "Rowan walked off without buying when he heard the price."),
            m("mem:adaeze:23", "Sold two sickles to farmers from the hill."),
        ),
        ("sickles", "market", "price"),
    ),
    Scene(
        "baker-day-feast",
        "The feast bake.",
        "ori:bram",
        (
            m("mem:bram:2", "Maren ordered twelve loaves for the inn's feast."),
            m("mem:bram:3", "Burnt the last four loaves and baked them again at midnight."),
            m("mem:bram:4", "Delivered the loaves to the Drowsy Heron at dawn."),
        ),
        ("feast", "loaves", "Maren"),
        arc="arc:harvest-feast",
    ),
    Scene(
        "baker-day-children",
        "A day of small visitors.",
        "ori:bram",
        (
            m("mem:bram:12", "Three more children came to the window this morning."),
            m("mem:bram:13", "Taught Bisi to braid a loaf."),
        ),
        ("children", "braid", "Bisi"),
    ),
    Scene(
        "baker-day-flour",
        "Low flour.",
        "ori:bram",
        (
            m("mem:bram:8", "Baked smaller loaves to make the flour last."),
            m("mem:bram:13", "Walked to the mill; the millrace was still jammed."),
        ),
        ("flour", "mill", "smaller"),
    ),
    Scene(
        "herbalist-day-rounds",
        "Rounds of the sick.",
        "ori:kemi",
        (
            m("mem:kemi:3", "Willow bark tea broke the miller's fever in two days."),
            m("mem:kemi:14", "Gathered yarrow by the chapel wall."),
        ),
        ("willow", "yarrow", "fever"),
    ),
    Scene(
        "herbalist-day-goat",
        "The goat incident.",
        "ori:kemi",
        (
            m("mem:kemi:8", "Locked the foxglove away after the goat ate some and sickened."),
            m("mem:kemi:15", "Sat with the goat through the night; it lived."),
        ),
        ("goat", "foxglove", "night"),
    ),
    Scene(
        "herbalist-day-cousin",
        "Looking after her cousin.",
        "ori:kemi",
        (
            m("mem:kemi:13", "Left a pouch of chamomile at the gatehouse for Idris."),
            m("mem:kemi:16", "Dried the last of the summer mint."),
        ),
        ("chamomile", "Idris", "mint"),
    ),
    Scene(
        "ferry-day-wedding",
        "El día de la boda.",
        "ori:tomas",
        (
            m("mem:tomas:3", "Crucé a los invitados de la boda en tres viajes."),
            m("mem:tomas:11", "Lucía bailó con el molinero en la orilla."),
        ),
        ("boda", "viajes", "Lucía"),
    ),
    Scene(
        "ferry-day-storm",
        "Un día de tormenta.",
        "ori:tomas",
        (
            m("mem:tomas:9", "La última tormenta partió un remo y casi volcamos junto a la roca."),
            m("mem:tomas:12", "Pasé la tarde tallando un remo nuevo."),
        ),
        ("remo", "tormenta"),
    ),
    Scene(
        "loom-day-winter",
        "Tejer para el invierno.",
        "ori:lucia",
        (
            m("mem:lucia:6", "Un paño de lana fina lleva tres días en el telar."),
            m("mem:lucia:7", "Inés encargó dos paños para el invierno."),
        ),
        ("telar", "paños", "invierno"),
    ),
    Scene(
        "loom-day-market",
        "Un día de mercado.",
        "ori:lucia",
        (
            m("mem:lucia:12", "Yétúndé cambió ñame por la tela amarilla."),
            m("mem:lucia:13", "Vendí tres cintas rojas antes del mediodía."),
        ),
        ("mercado", "cintas", "Yétúndé"),
    ),
    Scene(
        "hunter-day-arrows",
        "Ọjọ́ tí kò ṣọdẹ.",
        "ori:femi",
        (
            m("mem:femi:3", "Òṣùpá kún lánàá; mi ò ní ṣọdẹ lónìí."),
            m("mem:femi:4", "Mo tún ọfà mi ṣe dípò rẹ̀."),
        ),
        ("ofa", "osupa"),
    ),
    Scene(
        "hunter-day-leopard",
        "Ọjọ́ ẹkùn.",
        "ori:femi",
        (
            m("mem:femi:7", "Mo rí ipa ẹsẹ̀ ẹkùn ní ẹ̀gbẹ́ odò ní àárọ̀ yìí."),
            m("mem:femi:8", "Mo sọ fún Idris kí ó ṣọ́ ẹnu ibodè dáadáa."),
        ),
        ("ekun", "Idris"),
    ),
    Scene(
        "market-day-yams",
        "Ọjọ́ ọjà.",
        "ori:yetunde",
        (
            m("mem:yetunde:4", "Mo ta iṣu márùn-ún ní ọgọ́rùn-ún naira lánàá."),
            m("mem:yetunde:11", "Lucía fún mi ní aṣọ aláwọ̀ ìyeyè."),
        ),
        ("isu", "Lucía", "aso"),
    ),
    Scene(
        "market-day-meat",
        "Ẹran ìgbẹ́ ní ọjà.",
        "ori:yetunde",
        (
            m("mem:yetunde:9", "Fẹ́mi mú ẹran ìgbẹ́ wá sí ọjà ní ọjọ́ Ẹtì."),
            m("mem:yetunde:10", "Mo ta gbogbo ẹran náà kí ọjà tó parí."),
        ),
        ("eran", "Fẹ́mi", "Femi"),
    ),
    Scene(
        "mill-day-clearing",
        "Clearing the millrace.",
        "ori:oswin",
        (
            m("mem:oswin:12", "The millrace jammed with branches after the storm; two days lost."),
            m("mem:oswin:14", "Cleared the last branch at sunset; the wheel turned again."),
        ),
        ("millrace", "wheel", "branches"),
    ),
    Scene(
        "mill-day-ledger",
        "A day with the ledger.",
        "ori:oswin",
        (
            m("mem:oswin:4", "Wrote the debt in red in the ledger."),
            m("mem:oswin:5", "Ground eleven sacks of barley."),
        ),
        ("ledger", "barley", "sacks"),
    ),
    Scene(
        "inn-day-pilgrims",
        "A crowded night at the inn.",
        "ori:maren",
        (
            m("mem:maren:9", "Turned away two pilgrims at dusk."),
            m("mem:maren:10", "Tomás told river stories by the fire until late."),
        ),
        ("pilgrims", "Tomás", "fire"),
    ),
    Scene(
        "inn-day-feast",
        "The harvest feast.",
        "ori:maren",
        (
            m("mem:maren:4", "Bram's twelve loaves arrived at dawn, still warm."),
            m("mem:maren:5", "The feast ran until the night bell."),
        ),
        ("feast", "loaves", "Bram"),
        arc="arc:harvest-feast",
    ),
    Scene(
        "inn-day-cider",
        "A quiet day.",
        "ori:maren",
        (
            m("mem:maren:3", "Forgot the traveller's name again and called him 'Green Cloak'."),
            m("mem:maren:11", "Pressed the first pear cider of the season."),
        ),
        ("cider", "pear", "Green Cloak"),
    ),
    Scene(
        "watch-night-lantern",
        "A night on the wall.",
        "ori:idris",
        (
            m(
                "mem:idris:11",
                "Saw a lantern moving along the east wall at midnight; it vanished by the well.",
            ),
            m("mem:idris:12", "Found fresh footprints by the well at dawn."),
        ),
        ("lantern", "footprints", "well"),
        arc="arc:east-wall-stranger",
    ),
    Scene(
        "watch-night-curfew",
        "A strict night.",
        "ori:idris",
        (
            m("mem:idris:6", "Tunde begged to come in late; I kept the gate shut."),
            m("mem:idris:7", "Reported the night to the council at dawn."),
        ),
        ("gate", "council", "Tunde"),
    ),
    Scene(
        "watch-night-quiet",
        "A quiet night.",
        "ori:idris",
        (
            m("mem:idris:15", "The night was quiet from the night bell to dawn."),
            m("mem:idris:14", "Kemi left chamomile at the gatehouse; slept well for once."),
        ),
        ("quiet", "Kemi", "chamomile"),
    ),
)
