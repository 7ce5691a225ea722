// Every experiment of the library, one factory each, named after the experiment. The registry
// (experiments() in experiment.cpp) is the one table that lists them; nothing else does.
#pragma once

#include "uatlab/experiment/experiment.hpp"

namespace uatlab::experiment {

namespace wang_e {
Experiment insight_1a();  // wang_e.cpp: the insights' tables
Experiment insight_1b();
Experiment insight_2a();
Experiment insight_2b();
Experiment insight_3a();
Experiment insight_3b();
Experiment insight_4a();
Experiment rates();  // wang_e_rates.cpp
}  // namespace wang_e
Experiment kajitsuka_memorization();  // memorization.cpp
Experiment kajitsuka_delta();         // kajitsuka.cpp
Experiment memorization_capacity();   // capacity.cpp
Experiment memorization_optimal();    // optimal.cpp
Experiment fang_fit();                // fang.cpp
Experiment fang_regression();         // fang.cpp
Experiment yun_certified();           // approximate.cpp
Experiment yun_mixers();              // mixers.cpp
Experiment yun_mixers_data();         // mixers.cpp

}  // namespace uatlab::experiment
